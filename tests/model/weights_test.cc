// Tensor shape checks of the weights reader: matrices, vectors and experts' 3-D matrices, and
// the architecture table.
#include "model/weights.h"

#include <gtest/gtest.h>

#include <string>

namespace ferrox {
namespace {

TensorView view(std::string name, int n_dims, std::array<int64_t, 4> ne) {
    TensorView t;
    t.name = std::move(name);
    t.n_dims = n_dims;
    t.ne = ne;
    return t;
}

TEST(Weights, ShapesOfMatricesVectorsAndExperts) {
    const TensorView m = view("blk.0.attn_q.weight", 2, {576, 960, 1, 1});
    EXPECT_TRUE(check_tensor_shape(m, {576, 960}).is_ok());
    EXPECT_FALSE(check_tensor_shape(m, {960, 576}).is_ok());
    EXPECT_FALSE(check_tensor_shape(m, {576}).is_ok());  // a matrix where a vector is wanted
    EXPECT_FALSE(check_tensor_shape(m, {576, 960, 8}).is_ok());

    const TensorView v = view("output_norm.weight", 1, {576, 1, 1, 1});
    EXPECT_TRUE(check_tensor_shape(v, {576}).is_ok());
    EXPECT_TRUE(check_tensor_shape(v, {576, 1}).is_ok());  // trailing 1s are the same shape
    EXPECT_FALSE(check_tensor_shape(v, {577}).is_ok());

    // Experts' matrices (a mixture of experts' ffn_*_exps): the expert the slowest dimension.
    const TensorView e = view("blk.0.ffn_up_exps.weight", 3, {2048, 768, 128, 1});
    EXPECT_TRUE(check_tensor_shape(e, {2048, 768, 128}).is_ok());
    EXPECT_FALSE(check_tensor_shape(e, {2048, 768}).is_ok());
    const Status bad = check_tensor_shape(e, {2048, 768, 64});
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.message(), "tensor 'blk.0.ffn_up_exps.weight' has shape [2048, 768, 128], expected [2048, 768, 64]");
    const Status flat = check_tensor_shape(m, {576, 960, 8});
    EXPECT_EQ(flat.message(), "tensor 'blk.0.attn_q.weight' has shape [576, 960, 1], expected [576, 960, 8]");
}

TEST(Weights, EveryRegisteredArchitectureIsFoundByItsName) {
    for (const char* name : {"llama", "mistral", "qwen2", "qwen3", "gemma3", "gemma2"}) {
        const ArchTraits* a = find_arch(name);
        ASSERT_NE(a, nullptr) << name;
        EXPECT_EQ(std::string(a->name), name);
        EXPECT_EQ(a->ffn, FfnKind::kDense);
    }
    for (const char* name : {"qwen3moe", "qwen2moe", "olmoe"}) {
        const ArchTraits* a = find_arch(name);
        ASSERT_NE(a, nullptr) << name;
        EXPECT_EQ(a->ffn, FfnKind::kMoe) << name;
    }
    EXPECT_TRUE(find_arch("llama")->moe_if_experts);  // Mixtral
    EXPECT_EQ(find_arch("deepseek2"), nullptr);
    EXPECT_EQ(find_arch(""), nullptr);
}

}  // namespace
}  // namespace ferrox
