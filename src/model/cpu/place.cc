// The CPU model's weights in place: which matrices are repacked for the many-column kernels,
// widened (Q5_0 as Q8_0) or copied into the model's huge-page arena, and which stay mapped.
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "kernels/ops.h"
#include "kernels/prefetch_feed.h"
#include "kernels/quants.h"
#include "kernels/attention_f16.h"
#include "model/cpu/internal.h"
#include "model/gelu.h"
#include "tensor/fp16.h"

namespace ferrox {

// Q5_0 blocks (F16 d, 32 high bits, 16 bytes of low nibbles; value (q - 16) * d) as Q8_0 blocks
// with the same d and qs = q - 16: every weight keeps its exact value. n % 32 == 0.
static void widen_q5_0_to_q8_0(const void* src, int64_t n, void* dst) {
    const auto* x = static_cast<const uint8_t*>(src);
    auto* y = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / 32; ++b, x += 22, y += 34) {
        uint32_t qh;
        std::memcpy(&qh, x + 2, 4);
        std::memcpy(y, x, 2);
        auto* qs = reinterpret_cast<int8_t*>(y + 2);
        for (int j = 0; j < 16; ++j) {
            const int lo = (x[6 + j] & 0x0F) | (((qh >> j) << 4) & 0x10);
            const int hi = (x[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10);
            qs[j] = static_cast<int8_t>(lo - 16);
            qs[j + 16] = static_cast<int8_t>(hi - 16);
        }
    }
}

bool can_pack_q8_0(const TensorView& t) { return t.ne[1] % 8 == 0 && t.ne[0] % 32 == 0 && t.ne[0] <= 32768; }

// Row `row` of a Q8_0 matrix repacked by repack8 (kernels/packed_avx2.cc): per group of 8 rows
// and block of 32 elements, the 8 F16 scales, then for each lane l (elements 4l..4l+3) the 4
// bytes of each row. Dequantized as Q8_0's own rows are (q * d, one rounding), so the bits are
// those of dequantize_row on the unpacked row.
void dequantize_packed_q8_0_row(const TensorView& t, int64_t row, float* y) {
    constexpr int64_t kBlockBytes = 8 * 34;
    const int64_t nb = t.ne[0] / 32;
    const int r = static_cast<int>(row % 8);
    const auto* g = static_cast<const uint8_t*>(t.data) + (row / 8) * nb * kBlockBytes;
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* o = g + b * kBlockBytes;
        uint16_t dh;
        std::memcpy(&dh, o + 2 * r, 2);
        const float d = fp16_to_fp32(dh);
        for (int l = 0; l < 8; ++l) {
            const auto* q = reinterpret_cast<const int8_t*>(o + 16 + 32 * l + 4 * r);
            for (int k = 0; k < 4; ++k) y[b * 32 + 4 * l + k] = static_cast<float>(q[k]) * d;
        }
    }
}

// Where the weights live after load. Matrices of a type with a packed layout
// (QuantKernels::repack8: 8 rows interleaved, one product for decode, batches and prompts with a
// fixed per-output order) are repacked into one huge-page arena this model owns. Unless the
// weights stay mapped (ModelOptions::mmap), the other matrices and the embedding table are
// copied into it too. Each tensor's file pages are given back once it is placed: the file is
// mapped, not read into a buffer first, so each weight byte is read once and written once
// (reading the whole file into huge pages and repacking from there took twice the page zeroing
// and copying).
Model::GemmPacked Model::packed_gemm(const QuantKernels& k) const {
    return !opts_.ggml_order && k.gemm_packed8_ref_order ? k.gemm_packed8_ref_order : k.gemm_packed8;
}

void Model::place_weights(const GgufFile& f, bool repack, bool copy) {
    struct Move {
        const TensorView** w;
        bool pack;
        bool widen = false;  // Q5_0 rewritten as Q8_0 (then packed, unless in llama.cpp's order)
    };
    std::vector<Move> todo;
    // experts: a mixture's 3-D expert tensors, which ModelOptions::mmap leaves mapped and
    // unpacked (they are most of such a file, and a token reads a few experts of each).
    auto consider = [&](const TensorView** w, bool experts = false) {
        if (!*w) return;
        if (experts && opts_.mmap) return;
        const TensorView& t = **w;
        const QuantKernels& k = quant_kernels(t.type);
        // (A 3-D experts' tensor is packed as its n_expert * n_out rows: with n_out % 8 == 0 no
        // group of 8 spans two experts.)
        const bool shape_ok = t.ne[1] % 8 == 0 && t.ne[0] % 32 == 0 && t.ne[0] <= 32768 && t.ne[3] == 1;
        // In llama.cpp's order (ggml_order) a type with its own kernels for it is not packed.
        const auto x86_order = [&](const QuantKernels& kt) { return opts_.ggml_order && kt.vec_dot_rows_x86; };
        const bool pack = repack && k.repack8 && k.gemm_packed8 && shape_ok && !x86_order(k);
        // Q5_0 has no packed layout, and its products (5-bit unpacking per weight, no prompt
        // tile kernel) were two thirds of a Gemma 3 prompt. Its weights are exactly Q8_0 ones
        // ((q - 16) * d fits an int8 with the same scale), so it is rewritten as Q8_0 and packed:
        // the same weight values, ~1.5x their bytes (Gemma 3 270M: +23 MiB).
        const QuantKernels& k8 = quant_kernels(DType::kQ8_0);
        // In llama.cpp's order it is widened and left unpacked: Q8_0's vec_dot and prompt tiles
        // give Q5_0's vec_dot bits (the same integer lanes, the same scale).
        const bool widen = repack && t.type == DType::kQ5_0 && k8.repack8 && k8.gemm_packed8 && shape_ok;
        if (pack || widen || copy) todo.push_back({w, pack || (widen && !x86_order(k8)), widen});
    };
    for (LayerWeights& L : w_.layers) {
        for (const TensorView** w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.gate_inp}) {
            consider(w);
        }
        for (const TensorView** w : {&L.gate_exps, &L.up_exps, &L.down_exps}) consider(w, /*experts=*/true);
    }
    const bool tied = w_.output == w_.tok_embd;
    if (!tied) consider(&w_.output);
    // A tied Q8_0 table is packed for the output product (a large part of decode with a big
    // vocabulary: Gemma's 262,144 rows) and its embedding rows gathered from the packed layout
    // (dequantize_packed_q8_0_row); another table is read by row, never packed.
    const QuantKernels& k8 = quant_kernels(DType::kQ8_0);
    const bool pack_tied = tied && repack && w_.tok_embd->type == DType::kQ8_0 && can_pack_q8_0(*w_.tok_embd) &&
                           k8.repack8 && k8.gemm_packed8 && !(opts_.ggml_order && k8.vec_dot_rows_x86);
    if (copy || pack_tied) todo.push_back({&w_.tok_embd, pack_tied});
    if (todo.empty()) return;
    const auto placed_bytes = [](const Move& m) {
        TensorView v = **m.w;
        if (m.widen) v.type = DType::kQ8_0;
        return static_cast<size_t>(v.n_bytes());
    };
    size_t total = 0;
    for (const Move& m : todo) total += (placed_bytes(m) + 63) / 64 * 64;
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t arena_bytes = (total + kHuge - 1) / kHuge * kHuge;
    packed_arena_.reset(static_cast<uint8_t*>(std::aligned_alloc(kHuge, arena_bytes)));
    CHECK(packed_arena_ != nullptr);
    madvise(packed_arena_.get(), arena_bytes, MADV_HUGEPAGE);
    uint8_t* at = packed_arena_.get();
    for (const Move& m : todo) {
        auto view = std::make_unique<TensorView>(**m.w);
        const size_t file_bytes = static_cast<size_t>(view->n_bytes());
        if (m.widen) {
            std::vector<uint8_t> q8(placed_bytes(m));
            widen_q5_0_to_q8_0((*m.w)->data, view->n_elements(), q8.data());
            view->type = DType::kQ8_0;
            if (m.pack) {
                quant_kernels(DType::kQ8_0).repack8(q8.data(), view->ne[0], view->n_rows(), at);
            } else {
                std::memcpy(at, q8.data(), q8.size());
            }
        } else if (m.pack) {
            quant_kernels(view->type).repack8((*m.w)->data, view->ne[0], view->n_rows(), at);
        } else {
            std::memcpy(at, (*m.w)->data, file_bytes);
        }
        f.discard((*m.w)->data, file_bytes);  // only the placed copy is read now
        view->data = at;
        view->packed8 = m.pack;
        at += (placed_bytes(m) + 63) / 64 * 64;
        *m.w = view.get();
        packed_views_.push_back(std::move(view));
    }
    if (tied) w_.output = w_.tok_embd;
}

}  // namespace ferrox
