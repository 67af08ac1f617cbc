#include "server/openai/reasoning_seal.h"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <random>

namespace ferrox {
namespace {

constexpr std::array<uint32_t, 64> kK = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void compress(std::array<uint32_t, 8>& h, const uint8_t* block) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
        w[i] = (uint32_t(block[4 * i]) << 24) | (uint32_t(block[4 * i + 1]) << 16) | (uint32_t(block[4 * i + 2]) << 8) |
               uint32_t(block[4 * i + 3]);
    }
    for (int i = 16; i < 64; ++i) {
        const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; ++i) {
        const uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[i] + w[i];
        const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

const std::string& key() {
    static const std::string k = [] {
        if (const char* env = std::getenv("FERROX_RESPONSES_KEY"); env && *env) return sha256(env);
        std::random_device rd;
        std::string r(32, '\0');
        for (char& c : r) c = static_cast<char>(rd() & 0xFF);
        return r;
    }();
    return k;
}

constexpr std::string_view kPrefix = "fxr1.";
constexpr const char* kB64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(std::string_view in) {
    std::string out;
    size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
        for (int s = 18; s >= 0; s -= 6) out += kB64[(v >> s) & 63];
    }
    if (i < in.size()) {
        uint32_t v = uint8_t(in[i]) << 16;
        if (i + 1 < in.size()) v |= uint8_t(in[i + 1]) << 8;
        out += kB64[(v >> 18) & 63];
        out += kB64[(v >> 12) & 63];
        out += i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

std::optional<std::string> unbase64(std::string_view in) {
    if (in.size() % 4) return std::nullopt;
    std::string out;
    uint32_t v = 0;
    int bits = 0;
    for (size_t i = 0; i < in.size(); ++i) {
        const char c = in[i];
        if (c == '=') {
            if (i + 2 < in.size()) return std::nullopt;
            break;
        }
        const char* p = std::char_traits<char>::find(kB64, 64, c);
        if (!p) return std::nullopt;
        v = (v << 6) | static_cast<uint32_t>(p - kB64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((v >> bits) & 0xFF);
        }
    }
    return out;
}

}  // namespace

std::string sha256(std::string_view data) {
    std::array<uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    size_t i = 0;
    for (; i + 64 <= data.size(); i += 64) compress(h, reinterpret_cast<const uint8_t*>(data.data() + i));
    uint8_t tail[128] = {};
    const size_t rest = data.size() - i;
    for (size_t k = 0; k < rest; ++k) tail[k] = static_cast<uint8_t>(data[i + k]);
    tail[rest] = 0x80;
    const size_t n = rest + 1 + 8 <= 64 ? 64 : 128;
    const uint64_t nbits = static_cast<uint64_t>(data.size()) * 8;
    for (int k = 0; k < 8; ++k) tail[n - 1 - k] = static_cast<uint8_t>(nbits >> (8 * k));
    for (size_t off = 0; off < n; off += 64) compress(h, tail + off);
    std::string out(32, '\0');
    for (int k = 0; k < 8; ++k) {
        for (int b = 0; b < 4; ++b) out[4 * k + b] = static_cast<char>(h[k] >> (24 - 8 * b));
    }
    return out;
}

std::string hmac_sha256(std::string_view key_in, std::string_view data) {
    std::string k = key_in.size() > 64 ? sha256(key_in) : std::string(key_in);
    k.resize(64, '\0');
    std::string ipad(64, '\0'), opad(64, '\0');
    for (int i = 0; i < 64; ++i) {
        ipad[i] = static_cast<char>(k[i] ^ 0x36);
        opad[i] = static_cast<char>(k[i] ^ 0x5c);
    }
    return sha256(opad + sha256(ipad + std::string(data)));
}

std::string reasoning_seal(std::string_view text) {
    return std::string(kPrefix) + base64(hmac_sha256(key(), text) + std::string(text));
}

std::optional<std::string> reasoning_unseal(std::string_view blob) {
    if (blob.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
    auto raw = unbase64(blob.substr(kPrefix.size()));
    if (!raw || raw->size() < 32) return std::nullopt;
    const std::string tag = raw->substr(0, 32), text = raw->substr(32);
    const std::string want = hmac_sha256(key(), text);
    uint8_t diff = 0;  // compared in time that does not depend on where they differ
    for (int i = 0; i < 32; ++i) diff |= static_cast<uint8_t>(tag[i] ^ want[i]);
    if (diff) return std::nullopt;
    return text;
}

}  // namespace ferrox
