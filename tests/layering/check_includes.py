#!/usr/bin/env python3
"""Fails when an #include crosses OpenMLA's layering (docs/architecture.md).

Layers, lowest first; a file may include its own layer and the ones listed:
  include/openmla  public headers: openmla/* only
  src/validate     openmla/*
  src/plan         openmla/*, validate/*
  src/reference    openmla/*, validate/*
  src/kernels      openmla/*, plan/partition.h, plan/chunk_partition.h and
                   plan/few_items_partition.h (the schedule kernel, the
                   in-kernel builds), kernels/common/*,
                   and under kernels/sm90: a family (a folder with a launch.h) includes
                   itself and the shared folders (the others), never another family;
                   a shared folder never includes a family
  src/api          openmla/*, validate/*, plan/*, kernels/* (launch.h and workspace.h)
  python/src       openmla/* and its own headers (the bindings)
tests/, bench/ and examples/ may include anything.

Usage: check_includes.py SOURCE_DIR       check the tree
       check_includes.py --self-test      check that the rules catch crossings
"""

import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
SOURCE_SUFFIXES = (".h", ".cuh", ".cpp", ".cu")


def family_folders(root):
    """Folders under src/kernels/sm90 that hold a family's host entry (launch.h)."""
    sm90 = os.path.join(root, "src", "kernels", "sm90")
    if not os.path.isdir(sm90):
        return set()
    return {d for d in os.listdir(sm90) if os.path.isfile(os.path.join(sm90, d, "launch.h"))}


def violation(path, target, families):
    """Why `path` (relative to the root) may not include `target`, or None."""
    if target.startswith("openmla/"):
        return None
    parts = path.split("/")
    if parts[0] == "include":
        return "public headers include only openmla/*"
    if parts[0] == "python":
        return None if "/" not in target else "bindings include only public headers (openmla/*)"
    if parts[0] != "src":
        return None  # tests, bench, examples
    layer = parts[1]
    allowed = {
        "validate": ("validate/",),
        "plan": ("validate/", "plan/"),
        "reference": ("validate/", "reference/"),
        "api": ("validate/", "plan/", "kernels/", "api/"),
        "kernels": ("kernels/", "plan/partition.h", "plan/chunk_partition.h", "plan/few_items_partition.h"),
    }.get(layer)
    if allowed is None:
        return "src/%s is not a known layer" % layer
    if not target.startswith(allowed):
        return "src/%s may include only %s" % (layer, ", ".join(("openmla/",) + allowed))
    if layer == "kernels" and parts[2] == "sm90" and target.startswith("kernels/sm90/"):
        own, other = parts[3], target.split("/")[2]
        if other in families and other != own:
            return ("a kernel family includes only itself and shared folders" if own in families
                    else "a shared kernel folder never includes a family (%s)" % other)
    return None


def check(root):
    families = family_folders(root)
    problems = []
    for top in ("include", "src", "python/src"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                full = os.path.join(folder, name)
                path = os.path.relpath(full, root).replace(os.sep, "/")
                with open(full, encoding="utf-8") as f:
                    text = f.read()
                for target in INCLUDE.findall(text):
                    why = violation(path, target, families)
                    if why:
                        problems.append('%s includes "%s": %s' % (path, target, why))
    return problems, families


def self_test():
    families = {"decode_dense", "decode_sparse_fp8"}
    bad = [
        ("src/plan/plan.cpp", "api/run_checks.h"),
        ("src/validate/validate.cpp", "plan/partition.h"),
        ("src/reference/dense_decode.cpp", "kernels/common/tma.cuh"),
        ("src/kernels/sm90/decode_sparse_fp8/kernel.cuh", "kernels/sm90/decode_dense/traits.h"),
        ("src/kernels/sm90/heads_on_m/consumers.cuh", "kernels/sm90/decode_dense/config.h"),
        ("src/kernels/common/combine/kernel.cu", "api/run_checks.h"),
        ("python/src/tensor_args.cpp", "validate/checks.h"),
        ("include/openmla/plan.h", "plan/partition.h"),
    ]
    good = [
        ("src/plan/plan.cpp", "validate/validate.h"),
        ("src/api/run.cpp", "kernels/sm90/decode_dense/launch.h"),
        ("src/kernels/sm90/decode_sparse_fp8/kernel.cuh", "kernels/sm90/heads_on_m/consumers.cuh"),
        ("src/kernels/sm90/decode_dense/kernel.cuh", "kernels/common/barriers.cuh"),
        ("src/kernels/common/schedule/kernel.cu", "plan/partition.h"),
        ("src/kernels/common/schedule/kernel.cu", "plan/chunk_partition.h"),
        ("src/kernels/common/schedule/lane_items.cuh", "plan/few_items_partition.h"),
        ("python/src/module.cpp", "tensor_args.h"),
        ("tests/cpu/test_capabilities.cpp", "api/run_checks.h"),
        ("src/validate/checks.h", "openmla/errors.h"),
    ]
    failures = [f"missed: {p} -> {t}" for p, t in bad if violation(p, t, families) is None]
    failures += [f"false alarm: {p} -> {t}: {violation(p, t, families)}" for p, t in good
                 if violation(p, t, families) is not None]
    for failure in failures:
        print(failure)
    print("self-test: %d of %d rules checks passed" % (len(bad) + len(good) - len(failures), len(bad) + len(good)))
    return 1 if failures else 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) != 2:
        print(__doc__)
        return 2
    problems, families = check(argv[1])
    for problem in problems:
        print(problem)
    print("include layering: %d crossing(s); kernel families: %s" % (len(problems), ", ".join(sorted(families))))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
