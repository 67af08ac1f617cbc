#!/usr/bin/env python3
"""The server's layer rule (docs/reference.md, "Source layout"): no file under src/server/ includes a header of
model/, kernels/, loader/, tensor/ or tokenizer/. The server reaches the model only through the
engine (engine/served_model.h, engine/request.h, engine/model_registry.h); the tokenizer, the
loaded model, hyperparameters and KV details stay below that boundary.

Checks direct includes only (`#include "model/..."`, `<tensor/...>`, or a relative path that
resolves into one of those folders); what an engine header pulls in is the engine's business.

Usage: layering_test.py [SRC_DIR]   (default: the src/ beside this tests/ folder)
Exit status 0 when no server file breaks the rule; 1 with one line per offending include.
"""
import os
import re
import sys

FORBIDDEN = ("model", "kernels", "loader", "tensor", "tokenizer")
SOURCE_SUFFIXES = (".h", ".hpp", ".cc", ".cpp", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def included_layer(src_dir, including_file, bracket, path):
    """The src/ folder an include names, or None when it names no folder under src/."""
    if bracket == '"' and path.startswith("."):
        resolved = os.path.normpath(os.path.join(os.path.dirname(including_file), path))
        rel = os.path.relpath(resolved, src_dir)
        if rel.startswith(".."):
            return None
        path = rel
    return path.replace("\\", "/").split("/", 1)[0] if "/" in path else None


def violations(src_dir):
    """(file, line number, include line) for each forbidden include, and the number of files read."""
    server_dir = os.path.join(src_dir, "server")
    found, n_files = [], 0
    for root, _, files in os.walk(server_dir):
        for name in sorted(files):
            if not name.endswith(SOURCE_SUFFIXES):
                continue
            path = os.path.join(root, name)
            n_files += 1
            with open(path, encoding="utf-8", errors="replace") as f:
                for i, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m and included_layer(src_dir, path, m.group(1), m.group(2)) in FORBIDDEN:
                        found.append((os.path.relpath(path, src_dir), i, line.strip()))
    return found, n_files


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    src_dir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "src"))
    found, n_files = violations(src_dir)
    if n_files == 0:  # a wrong path must not pass as "no violations"
        print(f"layering_test: no source files under {os.path.join(src_dir, 'server')}", file=sys.stderr)
        return 1
    for rel, line_no, text in found:
        print(f"src/{rel}:{line_no}: {text}: the server may not include {'/'.join(FORBIDDEN)} headers "
              "(docs/reference.md, Source layout): go through the engine", file=sys.stderr)
    if found:
        return 1
    print(f"layering_test: {n_files} files under src/server include no model, kernels, loader, tensor "
          "or tokenizer header")
    return 0


if __name__ == "__main__":
    sys.exit(main())
