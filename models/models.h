// Every net of models/ (models/README.md), and make_model to build one by name.
#pragma once

#include <memory>
#include <string>

#include "framework/demi/demi.h"
#include "models/airnet.h"
#include "models/cct.h"
#include "models/small_cnn.h"

namespace demi::models {

// "SmallCNN", "AirNet", "cct7" (CCT-7/3x1) or "cct4" (CCT-4/3x2), spelled exactly so; throws
// demi::Error naming the choices for anything else.
std::shared_ptr<nn::Module> make_model(const std::string& name, Generator& gen = default_generator());

}  // namespace demi::models
