#!/usr/bin/env bash
# Review R22's slow procedure (not collected by pytest; several minutes, needs PyPI):
# build the wheel and the sdist, install the wheel into fresh venvs under a scratch folder with
# (a) the newest releases every range of pyproject.toml allows and (b) the LOWEST release of
# every range (uv's --resolution lowest-direct over the ranges themselves), and run a
# representative subset of the suite against each, from a copy of tests/ beside no agentgate/
# (so the installed wheel is what is imported, not the source tree).
#   bash tests/r22_install_matrix.sh [SCRATCH]      (default /tmp/r22-matrix)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
W="${1:-/tmp/r22-matrix}"
rm -rf "$W" && mkdir -p "$W"
python3 -m venv "$W/tools" && "$W/tools/bin/pip" install -q build uv
(cd "$ROOT" && "$W/tools/bin/python" -m build -q -o "$W/dist" .)   # sdist, then the wheel FROM it
WHEEL="$(ls "$W"/dist/agentgate_middleware-*.whl)"
"$W/tools/bin/python" - "$ROOT/pyproject.toml" "$W" <<'EOF'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
open(f"{sys.argv[2]}/core.in", "w").write("\n".join(project["dependencies"]) + "\n")
lg = project["dependencies"] + project["optional-dependencies"]["langgraph"]
open(f"{sys.argv[2]}/lg.in", "w").write("\n".join(lg) + "\n")
EOF
CORE_TESTS="test_authority_decisions.py test_authority_encoding.py test_authority_grants.py
  test_authority_vectors.py test_policy_load.py test_policy_lint.py test_policy_index.py test_keys.py
  test_audit_log.py test_audit_entry.py test_audit_tamper.py test_store.py test_ledger.py test_gate.py
  test_gate_run.py test_cli_grant.py test_audit_cli.py test_spans.py test_dispatch_dispatcher.py
  test_dispatch_metrics.py test_review_r40_broker.py test_review_r40_faults.py test_review_r40_stateful.py"
# The LangGraph subset adds the newer middleware, streaming and gateway files (R41: the matrix ran
# none of dispatch streaming, cut answers, time travel, tracing or the gateway SDK files).
LG_TESTS="$CORE_TESTS test_langgraph.py test_gateway.py test_gateway_hostile.py test_dispatch_review.py
  test_dispatched_streaming.py test_cut_answers.py test_review_r40_gatewaysdk.py
  test_review_r40_timetravel.py test_review_r40_tracing.py"
mkdir -p "$W/t" && cp -r "$ROOT"/{tests,policies,examples,docs,pyproject.toml} "$W/t/"
ln -sfn "$ROOT/../shared" "$W/shared"   # tests read ../shared from the folder above tests/
run() {  # NAME RESOLUTION INPUT TESTS...
  local name=$1 resolution=$2 input=$3; shift 3
  python3 -m venv "$W/$name"
  "$W/tools/bin/uv" pip compile -q --resolution "$resolution" --python-version 3.11 "$W/$input" -o "$W/$name.txt"
  grep -E '^[A-Za-z0-9_.-]+(\[[^]]*\])?==' "$W/$name.txt" > "$W/$name.pins"
  "$W/tools/bin/uv" pip install -q --python "$W/$name/bin/python" -r "$W/$name.pins" -c "$W/$name.pins" \
    pytest pytest-asyncio pytest-timeout hypothesis 'openai>=1.40,<4'
  if [[ $input == lg.in ]]; then
    "$W/tools/bin/uv" pip install -q --python "$W/$name/bin/python" -c "$W/$name.pins" 'langchain-openai>=0.3,<2'
  fi
  "$W/tools/bin/uv" pip install -q --python "$W/$name/bin/python" --no-deps "$WHEEL"
  echo "== $name: $(tr '\n' ' ' < "$W/$name.pins")"
  (cd "$W/t" && "$W/$name/bin/python" -m pytest -q -p no:cacheprovider -m "not slow" --timeout 120 \
    $(printf 'tests/%s ' "$@")) || { echo "== $name: FAILURES (see above)"; FAILED="$FAILED $name"; }
}
FAILED=""
run low-core lowest-direct core.in $CORE_TESTS
run low-lg lowest-direct lg.in $LG_TESTS
run new-lg highest lg.in $LG_TESTS
if [[ -n $FAILED ]]; then echo "== failed:$FAILED"; exit 1; fi
echo "== all resolutions passed"
