#pragma once
#include <string>
#include <vector>

namespace gf {

extern const char* const kConfigDefaults;
extern const char* const kItemTemplates;
const std::vector<std::string>& cpu_ignored_keys();
const std::vector<std::string>& polymorphic_keys();

}  // namespace gf
