# fa_warnings(<target>): the project's warning set, applied to every target we own.
function(fa_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow -Wconversion -Wno-sign-conversion)
endfunction()
