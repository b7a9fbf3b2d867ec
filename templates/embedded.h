// embedded.h -- the template files (.cuh), embedded in the library at build time by cmake/embed_templates.cmake.
#pragma once

#include <string_view>

namespace fa::templates {

struct Template {
  const char* name;    // path below templates/, e.g. "fwd_ref.cuh", "common/sm80.cuh": the name #included
  const char* source;  // file contents
};
extern const Template kAll[];
extern const int kCount;

// The template of that name, or nullptr.
inline const Template* find(std::string_view name) {
  for (int i = 0; i < kCount; ++i)
    if (name == kAll[i].name) return &kAll[i];
  return nullptr;
}

}  // namespace fa::templates
