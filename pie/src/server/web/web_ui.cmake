# The web page of `orchard serve` (GET /: chat, structured-output playground, dashboard): the files of this
# folder and the JavaScript libraries of four Debian packages, embedded in the binary at build time
# (tools/embed_web_assets.cmake), so the page works offline and nothing is fetched at run time. A library
# absent at configure time is left out, said in one configure line; the page then works without that
# feature. Defines ORCHARD_WEB_ASSETS_CPP, the generated source for pie_server.
option(ORCHARD_WEB_UI "Embed the web page (chat, playground, dashboard) in orchard serve" ON)
include(${PROJECT_SOURCE_DIR}/tools/embed_web_assets.cmake)

set(_web_assets "")
if(ORCHARD_WEB_UI)
  # orchard_web_library(PACKAGE URL WITHOUT FILE...): the first FILE that exists is served at URL; when
  # none does, one configure line says what the page does without it.
  function(orchard_web_library package url without)
    foreach(file IN LISTS ARGN)
      if(EXISTS "${file}")
        set(_web_assets ${_web_assets} "${url}=${file}" PARENT_SCOPE)
        return()
      endif()
    endforeach()
    message(STATUS "web page: ${package} not found (apt-get install ${package}): ${without}")
  endfunction()
  set(ORCHARD_WEB_JAVASCRIPT_DIR /usr/share/javascript CACHE PATH "Where libjs-* packages put their files")
  set(ORCHARD_WEB_NODEJS_DIR /usr/share/nodejs CACHE PATH "Where node-* packages put their files")
  set(js ${ORCHARD_WEB_JAVASCRIPT_DIR})
  # Debian 12's security update of DOMPurify (2.4.1+dfsg+~2.4.0-2+deb12u1) turned one line of sanitize()
  # into a test of an undeclared variable, so every call with markup throws "ReferenceError: shadowNode is
  # not defined". Upstream's line (every 2.x release) is `if (body && FORCE_BODY)`: that line is restored in
  # a copy of the readable build (the minified one cannot be mended by text).
  set(_purify ${ORCHARD_WEB_NODEJS_DIR}/dompurify/dist/purify.js)
  if(EXISTS ${_purify})
    file(READ ${_purify} _text)
    set(_broken "if (shadowNode.__depth >= MAX_NESTING_DEPTH || numberIsNaN(shadowNode.__depth)) {\n        _forceRemove(body.firstChild);")
    string(FIND "${_text}" "${_broken}" _at)
    if(NOT _at EQUAL -1)
      string(REPLACE "${_broken}" "if (body && FORCE_BODY) {\n        _forceRemove(body.firstChild);" _text "${_text}")
      set(_purify ${CMAKE_CURRENT_BINARY_DIR}/web_lib/purify.js)
      file(WRITE ${_purify} "${_text}")
      message(STATUS "web page: node-dompurify: mended Debian's deb12u1 sanitize() (undeclared shadowNode)")
    endif()
  endif()
  orchard_web_library(node-dompurify /ui/lib/purify.js "answers are shown as plain text, not Markdown" ${_purify})
  orchard_web_library(libjs-marked /ui/lib/marked.js "answers are shown as plain text, not Markdown"
                      ${js}/marked/marked.min.js ${js}/marked/marked.umd.min.js)
  orchard_web_library(libjs-highlight.js /ui/lib/highlight.js "code blocks are not highlighted"
                      ${js}/highlight.js/highlight.min.js)
  # Its a11y-light theme (WCAG AA contrast), from the same package.
  if(EXISTS ${js}/highlight.js/highlight.min.js AND EXISTS ${js}/highlight.js/styles/a11y-light.css)
    list(APPEND _web_assets "/ui/lib/highlight.css=${js}/highlight.js/styles/a11y-light.css")
  endif()
  orchard_web_library(libjs-chart.js /ui/lib/chart.js "the dashboard shows numbers without charts"
                      ${js}/chart.js/chart.min.js ${js}/chart.js/Chart.min.js)
  # The page's own files; index.html is the page at /.
  file(GLOB _web_files CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.html ${CMAKE_CURRENT_LIST_DIR}/*.js
       ${CMAKE_CURRENT_LIST_DIR}/*.css ${CMAKE_CURRENT_LIST_DIR}/*.svg)
  foreach(file IN LISTS _web_files)
    get_filename_component(name "${file}" NAME)
    if(name STREQUAL "index.html")
      list(APPEND _web_assets "/=${file}")
    else()
      list(APPEND _web_assets "/ui/${name}=${file}")
    endif()
  endforeach()
else()
  message(STATUS "web page: off (ORCHARD_WEB_UI=OFF): GET / answers 404")
endif()
set(ORCHARD_WEB_ASSETS_CPP ${CMAKE_CURRENT_BINARY_DIR}/web_assets.cpp)
orchard_embed_web_assets(OUTPUT ${ORCHARD_WEB_ASSETS_CPP} WORK_DIR ${CMAKE_CURRENT_BINARY_DIR}/web_assets
                         ASSETS ${_web_assets})
