// The int8 KV-cache decoding extension against attention in kiln ops: on the
// dequantized cache the two agree to float rounding; against the float
// cache they differ by the quantization only. Plus quantize's round trip and
// the extension's refusal of bad shapes.
#include <kiln/call_op.h>
#include <kiln/extension.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>

int main() {
  using namespace kiln;
  load_extension(KILN_KVINT8_EXTENSION);
  manual_seed(5);
  int failures = 0;
  auto check_close = [&](const Tensor& got, const Tensor& want, double tol, const char* what) {
    const double err = (got.to(kFloat64) - want.to(kFloat64)).abs().max().item<double>();
    std::printf("%s: max error %.3g\n", what, err);
    if (!(err <= tol)) ++failures;
  };
  for (const Shape& s : {Shape{1, 1, 1, 8}, Shape{2, 3, 37, 16}, Shape{1, 8, 300, 64}}) {
    const int64_t B = s[0], H = s[1], S = s[2], D = s[3];
    const Tensor k = randn(s), v = randn(s), q = randn({B, H, D});
    const auto kq = call_op("kvint8::quantize", {k});
    const auto vq = call_op("kvint8::quantize", {v});
    const Tensor k8 = std::get<Tensor>(kq[0]), ks = std::get<Tensor>(kq[1]);
    const Tensor v8 = std::get<Tensor>(vq[0]), vs = std::get<Tensor>(vq[1]);
    const Tensor k_deq = k8.to(kFloat64) * ks.to(kFloat64).unsqueeze(-1);
    const Tensor v_deq = v8.to(kFloat64) * vs.to(kFloat64).unsqueeze(-1);
    // Round trip: within half a quantization step of the float values.
    const double step = ks.max().item<double>();
    check_close(k_deq, k, 0.5 * step + 1e-6, "quantize round trip");
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    const Tensor got = std::get<Tensor>(call_op("kvint8::decode", {q, k8, ks, v8, vs, scale})[0]);
    auto attention = [&](const Tensor& kk, const Tensor& vv) {
      const Tensor scores = matmul(q.to(kFloat64).unsqueeze(2), kk.to(kFloat64).transpose(-1, -2)) * scale;
      return matmul(softmax(scores, -1), vv.to(kFloat64)).squeeze(2);
    };
    check_close(got, attention(k_deq, v_deq), 1e-4, "decode vs kiln ops on the dequantized cache");
    check_close(got, attention(k, v), 0.05, "decode vs the float cache (quantization error)");
  }
  try {
    call_op("kvint8::decode", {randn({1, 2, 8}), randn({1, 2, 4, 8}), randn({1, 2, 4}), randn({1, 2, 4, 8}),
                               randn({1, 2, 4}), 1.0});
    std::printf("float32 K given as the int8 cache: no error\n");
    ++failures;
  } catch (const Error& e) {
    if (std::string(e.what()).find("k and v must be int8") == std::string::npos) {
      std::printf("unexpected message: %s\n", e.what());
      ++failures;
    }
  }
  std::printf(failures ? "kvint8 extension: %d failures\n" : "kvint8 extension: all checks hold\n", failures);
  return failures ? 1 : 0;
}
