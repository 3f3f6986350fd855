// anvil: the image model recipes — ResNet, ViT and DeiT classifiers (image_classifier), with the folder's
// preprocessing, and CLIP's image and text towers (zero-shot classification, embeddings), read from a Hugging
// Face folder.
#pragma once

#include "anvil/cpu.hpp"
#include "anvil/io/image.hpp"
#include "anvil/io/image_transforms.hpp"

#include "anvil/models/clip.hpp"
#include "anvil/models/image_classifier.hpp"
#include "anvil/models/resnet.hpp"
#include "anvil/models/vit.hpp"
