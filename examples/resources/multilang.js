// A small Storm multilang client for Node.js, in the manner of Storm's storm.js (written for Squall):
// JSON messages ended by a line "end" on stdin/stdout, the pid handshake, heartbeat syncs, and emits whose
// task ids (sent back unless need_task_ids is false) arrive in order, interleaved with new tuples.
"use strict";
const fs = require("fs");

function send(message) {
  process.stdout.write(JSON.stringify(message) + "\nend\n");
}

class BasicBolt {
  constructor() {
    this.pendingTaskIds = [];  // callbacks of emits waiting for their task ids, oldest first
    this.conf = null;
    this.context = null;
  }

  log(msg, level) { send({command: "log", msg: msg, level: level === undefined ? 2 : level}); }
  ack(id) { send({command: "ack", id: id}); }
  fail(id) { send({command: "fail", id: id}); }

  // Emits values anchored to the input ids; onTaskIds(taskIds) is called when the worker says where it went.
  emit(values, anchors, onTaskIds) {
    const message = {command: "emit", tuple: values, anchors: anchors};
    if (onTaskIds) {
      this.pendingTaskIds.push(onTaskIds);
    } else {
      message.need_task_ids = false;
    }
    send(message);
  }

  handle(message) {
    if (this.context === null) {
      this.conf = message.conf;
      this.context = message.context;
      fs.writeFileSync(message.pidDir + "/" + process.pid, "");
      send({pid: process.pid});
      this.initialize(this.conf, this.context);
    } else if (Array.isArray(message)) {
      this.pendingTaskIds.shift()(message);
    } else if (message.stream === "__heartbeat" && message.task === -1) {
      send({command: "sync"});
    } else {
      this.process(message);
    }
  }

  initialize(conf, context) {}

  run() {
    let buffered = "";
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", (chunk) => {
      buffered += chunk;
      let end;
      while ((end = buffered.indexOf("\nend\n")) >= 0) {
        const text = buffered.slice(0, end);
        buffered = buffered.slice(end + 5);
        if (text.trim()) this.handle(JSON.parse(text));
      }
    });
    process.stdin.on("end", () => process.exit(0));
  }
}

module.exports = {BasicBolt: BasicBolt};
