#!/usr/bin/env bash
# The test command: every test of the workspace, the facade's `object-store` feature included, and
# none skipped. Installs first what some tests need beyond cargo and is missing here: pyarrow (an
# independent Parquet reader) and moto's S3 server. `CI` is set for the run, so a test whose outside
# tool is still missing fails instead of skipping. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
need() {
  local module=$1 package=$2
  if ! python3 -c "import $module" 2>/dev/null; then
    echo "installing $package (python3 -m pip)"
    python3 -m pip install --quiet "$package" || python3 -m pip install --quiet --break-system-packages "$package"
  fi
}
need pyarrow pyarrow
need "moto.server, flask" "moto[server]"
export CI="${CI:-true}"
exec cargo test --workspace --features eagerio/object-store,eagerio/metrics "$@"
