// The built-in architectures' config sections (runner/config/arch_section.h), one file each under
// runner/config/arch/: what a `model.model_config.type` brings to the schema, the key rules and the
// reader. runner/config/arch_section.cpp lists them (a static library keeps a file only when
// something refers to it, so the built-in list names them rather than registering from the files).
#pragma once
#include "runner/config/arch_section.h"

namespace gf {

ArchConfigSection gpt2_config_section();   // runner/config/arch/gpt2.cpp
ArchConfigSection llama_config_section();  // runner/config/arch/llama.cpp

}  // namespace gf
