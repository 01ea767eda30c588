# Sourced by scripts/bootstrap.sh and scripts/test-compose.sh: one line per step with its time,
# the step's own output in the log ($LOG), whose last lines are shown when a step fails.

# step WHAT COMMAND...: runs COMMAND with its output in $LOG, and says how long it took.
step() {
  local what=$1 started=$SECONDS
  shift
  printf '==> %s ... ' "$what"
  echo "==> $what: $*" >>"$LOG"
  if "$@" >>"$LOG" 2>&1; then
    echo "$((SECONDS - started)) s (log $LOG)"
  else
    echo "failed after $((SECONDS - started)) s; the end of $LOG:"
    tail -n 40 "$LOG" >&2
    exit 1
  fi
}
