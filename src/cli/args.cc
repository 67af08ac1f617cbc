#include "cli/args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace ferrox::cli {

const FlagSpec* Args::find(const std::string& name) const {
    for (const auto& s : *specs_)
        for (const auto& n : s.names)
            if (n == name) return &s;
    return nullptr;
}

Expected<Args> Args::parse(int argc, char** argv, int first, const std::vector<FlagSpec>& specs) {
    Args a;
    a.specs_ = &specs;
    for (int i = first; i < argc; ++i) {
        std::string arg = argv[i];
        std::string value;
        bool has_inline = false;
        if (arg.rfind("--", 0) == 0) {
            auto eq = arg.find('=');
            if (eq != std::string::npos) {
                value = arg.substr(eq + 1);
                arg = arg.substr(0, eq);
                has_inline = true;
            }
        }
        const FlagSpec* s = a.find(arg);
        if (!s) return invalid_argument("unknown argument '" + arg + "'");
        if (s->takes_value) {
            if (!has_inline) {
                if (i + 1 >= argc) return invalid_argument("missing value for " + arg);
                value = argv[++i];
            }
        } else if (has_inline) {
            return invalid_argument(arg + " takes no value");
        }
        a.values_[s->names[0]] = value;
    }
    return a;
}

bool Args::has(const std::string& name) const {
    const FlagSpec* s = find(name);
    return s && values_.count(s->names[0]);
}

std::optional<std::string> Args::get(const std::string& name) const {
    const FlagSpec* s = find(name);
    if (!s) return std::nullopt;
    auto it = values_.find(s->names[0]);
    if (it == values_.end()) return std::nullopt;
    return it->second;
}

Expected<int> Args::get_int(const std::string& name, int def) const {
    auto v = get(name);
    if (!v) return def;
    errno = 0;
    char* end = nullptr;
    long x = std::strtol(v->c_str(), &end, 10);
    if (v->empty() || *end || errno || x < -(1L << 31) || x > (1L << 31) - 1) {
        return invalid_argument(name + ": '" + *v + "' is not an integer");
    }
    return static_cast<int>(x);
}

Expected<float> Args::get_float(const std::string& name, float def) const {
    auto v = get(name);
    if (!v) return def;
    char* end = nullptr;
    float x = std::strtof(v->c_str(), &end);
    if (v->empty() || *end || !std::isfinite(x)) return invalid_argument(name + ": '" + *v + "' is not a number");
    return x;
}

Expected<uint64_t> Args::get_u64(const std::string& name, uint64_t def) const {
    auto v = get(name);
    if (!v) return def;
    errno = 0;
    char* end = nullptr;
    unsigned long long x = std::strtoull(v->c_str(), &end, 10);
    if (v->empty() || *end || errno || (*v)[0] == '-') {
        return invalid_argument(name + ": '" + *v + "' is not a non-negative integer");
    }
    return static_cast<uint64_t>(x);
}

std::string usage(const std::vector<FlagSpec>& specs) {
    std::string out;
    for (const auto& s : specs) {
        if (s.names.empty()) {  // a heading: the flags below belong to it
            out += "\n" + s.help + ":\n";
            continue;
        }
        std::string names;
        for (const auto& n : s.names) names += (names.empty() ? "" : ", ") + n;
        if (s.takes_value) names += " X";
        out += "  " + names + std::string(names.size() < 28 ? 28 - names.size() : 1, ' ') + s.help + "\n";
    }
    return out;
}

}  // namespace ferrox::cli
