#pragma once
// A small command-line parser for the llama.cpp-style flags of `ferrox run|tokenize|bench`.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace ferrox::cli {

struct FlagSpec {
    std::vector<std::string> names;  // e.g. {"-n", "--n-predict"}; empty: a heading for usage()
    bool takes_value;
    std::string help;
};

class Args {
public:
    // Parses argv[first..]; unknown flags and missing values are errors.
    static Expected<Args> parse(int argc, char** argv, int first, const std::vector<FlagSpec>& specs);

    bool has(const std::string& name) const;
    std::optional<std::string> get(const std::string& name) const;
    Expected<int> get_int(const std::string& name, int def) const;
    Expected<float> get_float(const std::string& name, float def) const;
    Expected<uint64_t> get_u64(const std::string& name, uint64_t def) const;

private:
    std::map<std::string, std::string> values_;  // keyed by the spec's first name
    const std::vector<FlagSpec>* specs_ = nullptr;
    const FlagSpec* find(const std::string& name) const;
};

std::string usage(const std::vector<FlagSpec>& specs);

}  // namespace ferrox::cli
