# Sourced by .ci/run: give this shell what a fresh machine has, an empty HOME.
# The interpreter is resolved first: a pyenv shim finds its Python through the old HOME
# unless PYENV_ROOT is set, and the Makefile takes PYTHON from the environment.
PYTHON=$(python3 -c 'import sys; print(sys.executable)')
export PYTHON
TPS_FRESH_HOME=$(mktemp -d "${TMPDIR:-/tmp}/tps-fresh-home.XXXXXX")
export HOME=$TPS_FRESH_HOME
# Per-user locations that do not follow HOME when set explicitly: unset, so they do.
unset XDG_CACHE_HOME XDG_CONFIG_HOME XDG_DATA_HOME PIP_CACHE_DIR WHEEL_CACHE
# The empty HOME holds GBs by the end (pip cache, the compiled wheel): removed on exit
# unless TPS_CI_KEEP_HOME=1.
if [ "${TPS_CI_KEEP_HOME:-0}" != 1 ]; then
  trap 'rm -rf "$TPS_FRESH_HOME"' EXIT
fi
