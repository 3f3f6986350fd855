// anvil: the image model recipes — ResNet, ViT and DeiT classifiers (image_classifier), with the folder's
// preprocessing, and CLIP's image and text towers (zero-shot classification, embeddings), read from a Hugging
// Face folder.
#pragma once

#include "anvil/cpu.hpp"
#include "anvil/io/image.hpp"
#include "anvil/io/image_transforms.hpp"

#include "anvil/models/vision/clip.hpp"
#include "anvil/models/vision/image_classifier.hpp"
#include "anvil/models/vision/resnet.hpp"
#include "anvil/models/vision/vit.hpp"
