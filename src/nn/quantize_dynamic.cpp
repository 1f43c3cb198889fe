// quant::quantize_dynamic: every nn::Linear of a model switched to int8
// weights (quant::linear_dynamic), in place.
#include "kiln/nn.h"
#include "kiln/quantization.h"

namespace kiln::quant {

int64_t quantize_dynamic(nn::Module& model) {
  int64_t count = 0;
  for (const auto& [name, m] : model.named_modules())  // the model itself included
    if (auto* linear = dynamic_cast<nn::Linear*>(m)) {
      linear->dynamic_int8 = std::make_shared<const Int8Weight>(quantize_weight(linear->weight));
      ++count;
    }
  return count;
}

}  // namespace kiln::quant
