#!/bin/sh
# A multilang bolt in plain sh: the handshake (pid file and pid), heartbeat syncs, and for each input an emit of
# what its environment holds (the cwd's marker file, HOME set or not, AWS_SECRET_ACCESS_KEY) anchored to the
# input, then an ack. The worker writes each message on one line, then a line "end".
read_message() {
  message=""
  while IFS= read -r line; do
    [ "$line" = "end" ] && return 0
    message="$message$line"
  done
  exit 0  # stdin closed: the worker is gone
}
send() { printf '%s\nend\n' "$1"; }

read_message
pid_dir=$(printf '%s' "$message" | sed -n 's/.*"pidDir":"\([^"]*\)".*/\1/p')
: > "$pid_dir/$$"
send "{\"pid\":$$}"
while read_message; do
  case "$message" in
    *'"stream":"__heartbeat"'*) send '{"command":"sync"}' ;;
    *)
      id=$(printf '%s' "$message" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
      send "{\"command\":\"emit\",\"anchors\":[\"$id\"],\"tuple\":[\"$(cat marker.txt)\",\"${HOME:+home}\",\"${AWS_SECRET_ACCESS_KEY:-no secret}\"],\"need_task_ids\":false}"
      send "{\"command\":\"ack\",\"id\":\"$id\"}" ;;
  esac
done
