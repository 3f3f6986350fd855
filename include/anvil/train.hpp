// anvil: training — the optimizers (SGD, AdamW) over fp32 master weights with their shared interface, the
// learning-rate schedules and gradient clipping by global norm, the training loop, and fine-tuning of Hugging
// Face classifiers (what `anvil train` runs).
#pragma once

#include "anvil/train/adamw.hpp"
#include "anvil/train/clip.hpp"
#include "anvil/train/fine_tune.hpp"
#include "anvil/train/layers.hpp"
#include "anvil/train/loss.hpp"
#include "anvil/train/numpy_random.hpp"
#include "anvil/train/optimizer.hpp"
#include "anvil/train/schedule.hpp"
#include "anvil/train/sgd.hpp"
#include "anvil/train/trainer.hpp"
