// `gridformer config`'s own forms beyond printing a resolved config (runner/cli/config_cli.cpp).
#pragma once
#include <string>

namespace gf::cli {

// `config --from-hf DIR`: the model section of a Hugging Face config.json (DIR/config.json, or the file), checked by
// reading it back; printed on stdout. Returns the exit status (2 with a message on stderr for a problem).
int run_config_from_hf(const std::string& path);

}  // namespace gf::cli
