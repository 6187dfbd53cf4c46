#include "models/models.h"

namespace demi::models {

std::shared_ptr<nn::Module> make_model(const std::string& name, Generator& gen) {
  if (name == "SmallCNN") return std::make_shared<SmallCNN>(gen);
  if (name == "AirNet") return std::make_shared<AirNet>(gen);
  if (name == "cct7") return std::make_shared<Cct>(CctOptions::cct7_3x1(), gen);
  if (name == "cct4") return std::make_shared<Cct>(CctOptions::cct4_3x2(), gen);
  DEMI_THROW("unknown model '", name, "'; choose SmallCNN, AirNet, cct7 or cct4");
}

}  // namespace demi::models
