#include "models/models.h"

namespace demi::models {

std::shared_ptr<nn::Module> make_model(const std::string& name, Generator& gen) {
  if (name == "SmallCNN") return std::make_shared<SmallCNN>(gen);
  if (name == "AirNet") return std::make_shared<AirNet>(gen);
  DEMI_THROW("unknown model '", name, "'; choose SmallCNN or AirNet");
}

}  // namespace demi::models
