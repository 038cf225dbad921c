# Sourced by scripts/test, scripts/demo and scripts/upgrade-deps: the one pinned uv that reads
# and writes uv.lock (docs/development.md says why uv). It lives in .venv-uv, apart from the
# project's .venv, because `uv sync` makes .venv exactly what the lock says.
UV_VERSION=0.13.9
PYTHON=${PYTHON:-python3}
export UV_PYTHON_DOWNLOADS=never  # the interpreter is $PYTHON, never one uv fetches
export UV_PROJECT_ENVIRONMENT=.venv
# Installed packages get their bytecode at install time, as pip gives them: uv does not by
# default, and where PYTHONDONTWRITEBYTECODE is set (containers, some CI images) nothing ever
# writes it, so every process (each worker a test starts) compiled redis-py, pydantic and the
# rest from source again: 5-10 times the import time.
export UV_COMPILE_BYTECODE=1
# The platform's certificate store, as pip and git use, not only uv's bundled roots: behind a
# proxy that re-signs TLS, the bundled roots alone refuse every download.
export UV_SYSTEM_CERTS=${UV_SYSTEM_CERTS:-true}

case "$(.venv-uv/bin/uv --version 2>/dev/null)" in  # "uv 0.13.9 (x86_64-unknown-linux-gnu)"
  "uv $UV_VERSION "* | "uv $UV_VERSION") ;;
  *)
    "$PYTHON" -m venv .venv-uv
    .venv-uv/bin/python -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
    ;;
esac
UV=$PWD/.venv-uv/bin/uv

# Fails with one line naming the command to run when pyproject.toml's dependencies changed
# and uv.lock was not updated with them; any other failure of uv is printed as uv said it.
check_lock() {
  local out
  if ! out=$("$UV" lock --check --python "$PYTHON" 2>&1); then
    if grep -q "needs to be updated" <<<"$out"; then
      echo "$1: uv.lock does not match pyproject.toml; run scripts/upgrade-deps (or 'uv lock' to take in only your change) and commit uv.lock" >&2
    else
      echo "$out" >&2
    fi
    return 1
  fi
}

# The project's own modules (an editable install, so uv compiles nothing of them): compiled
# for the same reason; compileall skips what is up to date, and the interpreter ignores a
# stale file, so this never serves old code.
compile_project() {
  "$1" -m compileall -q -j0 deepagents agents >/dev/null
}
