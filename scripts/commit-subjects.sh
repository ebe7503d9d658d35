#!/usr/bin/env bash
# Fails when a commit since BASE has a subject longer than 72 characters (CONTRIBUTING.md,
# "Commit habits"). BASE is the last commit before the rule (8ed8484); older history is left
# as it is. In a clone without BASE (a shallow one) there is nothing to compare: it says so.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-8ed8484}
if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
  echo "commit-subjects: $base is not in this clone; nothing checked"
  exit 0
fi
long=$(git log --no-merges --format='%h %s' "$base..HEAD" | awk '{ s = substr($0, index($0, " ") + 1); if (length(s) > 72) print length(s) " " $0 }')
if [ -n "$long" ]; then
  echo "commit subjects over 72 characters (put the detail in the body):" >&2
  echo "$long" >&2
  exit 1
fi
echo "commit-subjects: $(git rev-list --no-merges --count "$base..HEAD") commit(s) since $base, every subject at most 72 characters"
