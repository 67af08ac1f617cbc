# The web page (webui/ at the top of the repository) and the Debian JavaScript libraries it
# uses, embedded into ferrox_server as one generated source. Included from
# src/server/CMakeLists.txt after ferrox_server is defined.
#
# Libraries come from Debian's packages (scripts/setup.sh installs them): libjs-marked,
# libjs-highlight.js, libjs-katex, node-dompurify. One that is missing at configure time is left
# out, with a warning; the page then says so and shows answers as plain text. Nothing is copied
# into the repository.
set(FERROX_WEBUI_DIR ${PROJECT_SOURCE_DIR}/webui)
set(FERROX_WEBUI_JS_ROOT /usr/share CACHE PATH "where Debian's libjs-* and node-* files live")

function(ferrox_webui_type file out)
  get_filename_component(ext "${file}" LAST_EXT)
  # Without parameters (a ';' would split the list): embed_webui.cmake adds text's charset.
  set(types ".html=text/html" ".js=text/javascript" ".css=text/css" ".json=application/json" ".svg=image/svg+xml"
            ".woff2=font/woff2" ".png=image/png" ".ico=image/x-icon")
  set(type "application/octet-stream")
  foreach(t IN LISTS types)
    string(FIND "${t}" "=" eq)
    string(SUBSTRING "${t}" 0 ${eq} e)
    math(EXPR eq "${eq} + 1")
    string(SUBSTRING "${t}" ${eq} -1 v)
    if(ext STREQUAL e)
      set(type "${v}")
    endif()
  endforeach()
  set(${out} "${type}" PARENT_SCOPE)
endfunction()

set(webui_assets "")
set(webui_identity "")
set(webui_depends "")
file(GLOB_RECURSE webui_files CONFIGURE_DEPENDS ${FERROX_WEBUI_DIR}/*.html ${FERROX_WEBUI_DIR}/*.js
     ${FERROX_WEBUI_DIR}/*.css ${FERROX_WEBUI_DIR}/*.svg)
foreach(f IN LISTS webui_files)
  file(RELATIVE_PATH rel ${FERROX_WEBUI_DIR} ${f})
  ferrox_webui_type(${f} type)
  list(APPEND webui_assets "/webui/${rel}|${f}|${type}|1")
  list(APPEND webui_identity "/webui/${rel}")
  list(APPEND webui_depends ${f})
endforeach()

# name: the manifest key; then url|file pairs (files relative to FERROX_WEBUI_JS_ROOT).
set(webui_libs
  "marked:/webui/lib/marked.min.js|javascript/marked/marked.umd.min.js"
  "dompurify:/webui/lib/purify.min.js|nodejs/dompurify/dist/purify.min.js"
  "highlight:/webui/lib/highlight.min.js|javascript/highlight.js/highlight.min.js,/webui/lib/hljs-light.css|javascript/highlight.js/styles/atom-one-light.css,/webui/lib/hljs-dark.css|javascript/highlight.js/styles/atom-one-dark.css"
  "katex:/webui/lib/katex/katex.min.js|javascript/katex/katex.min.js,/webui/lib/katex/katex.min.css|javascript/katex/katex.min.css")
set(manifest "")
foreach(lib IN LISTS webui_libs)
  string(FIND "${lib}" ":" colon)
  string(SUBSTRING "${lib}" 0 ${colon} name)
  math(EXPR colon "${colon} + 1")
  string(SUBSTRING "${lib}" ${colon} -1 files)
  string(REPLACE "," ";" files "${files}")
  set(found TRUE)
  set(lib_assets "")
  foreach(pair IN LISTS files)
    string(REPLACE "|" ";" pair "${pair}")
    list(GET pair 0 url)
    list(GET pair 1 rel)
    set(path ${FERROX_WEBUI_JS_ROOT}/${rel})
    if(NOT EXISTS ${path})
      set(found FALSE)
      break()
    endif()
    file(REAL_PATH ${path} path)
    ferrox_webui_type(${url} type)
    list(APPEND lib_assets "${url}|${path}|${type}|1")
    list(APPEND webui_depends ${path})
  endforeach()
  if(found AND name STREQUAL "katex")
    # KaTeX's fonts, as its CSS names them (fonts/ beside it); woff2 only: every browser the
    # page supports reads woff2 (listed first in KaTeX's @font-face), so the others are not
    # needed. Already compressed: stored as they are.
    file(GLOB katex_fonts ${FERROX_WEBUI_JS_ROOT}/javascript/katex/fonts/*.woff2)
    if(NOT katex_fonts)
      set(found FALSE)
    endif()
    foreach(font IN LISTS katex_fonts)
      get_filename_component(font_name ${font} NAME)
      file(REAL_PATH ${font} font)
      list(APPEND lib_assets "/webui/lib/katex/fonts/${font_name}|${font}|font/woff2|0")
      list(APPEND webui_depends ${font})
    endforeach()
  endif()
  if(found)
    list(APPEND webui_assets ${lib_assets})
  else()
    message(WARNING "webui: ${name} not found under ${FERROX_WEBUI_JS_ROOT} (install it with "
                    "scripts/setup.sh); the page will say that Markdown rendering is unavailable")
  endif()
  if(manifest)
    string(APPEND manifest ",")
  endif()
  if(found)
    string(APPEND manifest "\"${name}\":true")
  else()
    string(APPEND manifest "\"${name}\":false")
  endif()
endforeach()
set(manifest "{${manifest}}")

find_program(FERROX_GZIP gzip)
if(NOT FERROX_GZIP)
  set(FERROX_GZIP "")
endif()
set(webui_cc ${CMAKE_CURRENT_BINARY_DIR}/webui_assets.cc)
# The lists travel through a file: a command line would need every ';' and '|' escaped.
set(webui_args ${CMAKE_CURRENT_BINARY_DIR}/webui_assets.args.cmake)
file(CONFIGURE OUTPUT ${webui_args} CONTENT
     "set(ASSETS [==[${webui_assets}]==])\nset(IDENTITY [==[${webui_identity}]==])\nset(GZIP [==[${FERROX_GZIP}]==])\nset(MANIFEST [==[${manifest}]==])\n")
add_custom_command(
  OUTPUT ${webui_cc}
  COMMAND ${CMAKE_COMMAND} -DOUT=${webui_cc} -DARGS=${webui_args}
          -P ${CMAKE_CURRENT_SOURCE_DIR}/webui/embed_webui.cmake
  DEPENDS ${webui_depends} ${webui_args} ${CMAKE_CURRENT_SOURCE_DIR}/webui/embed_webui.cmake
  COMMENT "Embedding the web page (webui/ and Debian's JavaScript libraries)"
  VERBATIM)
target_sources(ferrox_server PRIVATE webui/webui_routes.cc ${webui_cc})
