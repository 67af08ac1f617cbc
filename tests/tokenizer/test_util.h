#pragma once
// Helpers shared by the tokenizer tests.

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ferrox::test {

inline std::string read_all(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

inline std::vector<std::string> split_lines(const std::string& s) {
    std::vector<std::string> out;
    std::string line;
    std::istringstream in(s);
    while (std::getline(in, line)) out.push_back(line);
    return out;
}

inline std::vector<int32_t> parse_ids(const std::string& line) {
    std::vector<int32_t> ids;
    std::istringstream in(line);
    long long x;
    while (in >> x) ids.push_back(static_cast<int32_t>(x));
    return ids;
}

inline std::string ids_to_string(const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ' ';
        s += std::to_string(ids[i]);
    }
    return s;
}

}  // namespace ferrox::test
