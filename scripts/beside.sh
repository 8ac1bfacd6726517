#!/usr/bin/env bash
# Runs a command in the background beside the next steps of `make test`, its output kept in a log until it is waited
# for: the command's output then comes whole rather than interleaved with the steps'.
#
#   beside.sh start NAME COMMAND…   starts COMMAND; its log is .state/beside/NAME.log
#   beside.sh wait NAME             waits for it to end, prints its log, exits with its status
#
# The command runs in a session of its own, so a `make test` stopped before its wait (Ctrl-C) leaves it running; the
# next start of the same NAME kills what is left of it first.
set -euo pipefail

state=.state/beside
usage() { echo "usage: beside.sh start NAME COMMAND… | beside.sh wait NAME" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
action=$1 name=$2
log=$state/$name.log status=$state/$name.status group=$state/$name.pgid
shift 2

case $action in
    start)
        [[ $# -ge 1 ]] || usage
        mkdir -p "$state"
        if [[ -f $group ]]; then kill -- "-$(cat "$group")" 2>/dev/null || true; fi
        rm -f "$log" "$status"
        # A session of its own (setsid): its process group is what a later start kills.
        setsid bash -c 'echo $$ >"$1"; status=$2; shift 2; "$@"; echo $? >"$status"' beside "$group" "$status" "$@" \
            >"$log" 2>&1 </dev/null &
        echo "beside.sh: $name runs in the background (log: $log)"
        ;;
    wait)
        [[ -f $group ]] || { echo "beside.sh: $name was not started" >&2; exit 2; }
        echo "beside.sh: waiting for $name …"
        while [[ ! -f $status ]] && kill -0 -- "-$(cat "$group")" 2>/dev/null; do sleep 2; done
        cat "$log"
        rm -f "$group"
        [[ -f $status ]] || { echo "beside.sh: $name ended without a status (killed?)" >&2; exit 1; }
        exit "$(cat "$status")"
        ;;
    *) usage ;;
esac
