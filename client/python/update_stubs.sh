#!/bin/sh
# Regenerates the Python stubs kept in client/python/cgacct/v1 from
# proto/cgacct/v1/accounting.proto, with Debian's protoc and
# grpc_python_plugin (protobuf-compiler, protobuf-compiler-grpc): what the
# build generates too (client/python/CMakeLists.txt). They are kept in the
# repository so that `pip install ./client/python` needs no protoc;
# PythonStubsCurrentTest fails when they differ from the build's.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
proto=$here/../../proto
protoc -I"$proto" --python_out="$here" --grpc_python_out="$here" \
  --plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" \
  "$proto/cgacct/v1/accounting.proto"
: >"$here/cgacct/v1/__init__.py"
