// Squall's Nimbus contract.
//
// Wire: framed transport, binary protocol, port 6627 by default (nimbus.thrift.port); frames
// larger than nimbus.thrift.max_buffer_size are refused.
//
// Compatibility rules, read these before editing:
//
// * Every struct, field and method that Apache Storm 1.x also has keeps Storm's name, field id,
//   type, requiredness and default, and fields are declared in id order. thriftpy2 writes fields
//   in declaration order, so this is what makes our bytes identical to Storm's and lets
//   streamparse and Storm's own clients talk to a Squall nimbus unchanged.
//   tests/test_thrift_wire.py compares every shared struct and method with Storm's IDL.
// * Fields Squall adds to a Storm struct take ids from 100 upward. Storm keeps growing its
//   structs from the low ids (and uses the 500s for resource fields), so low ids we picked today
//   could collide with a field a newer Storm client sends tomorrow. Readers skip ids they do not
//   know, so a Storm client simply ignores our 1xx fields. The one exception is a field taken
//   from a later Storm release, which keeps that release's id (RebalanceOptions 5).
// * Never reuse or renumber an id, not even after a field is dropped: old bytes live on in
//   clients and in the code store (which keeps StormTopology in this encoding). Drop a field
//   by commenting it out and leaving its id taken.
// * Structs and methods that exist only in Squall number their fields from 1.
// * Storm methods keep exactly Storm's exception lists. A client that does not know an exception
//   id sees a reply with nothing set, which a void call takes for success; a new exception on an
//   old method would turn a failure into a silent "ok" for streamparse and Java clients.
//
// Left out on purpose: blob store, DRPC, pacemaker, local-state (LS*) structs,
// profiling, page-info/aggregate stats, and Storm's ZooKeeper records (Squall keeps its
// ZooKeeper records as JSON).

// ---------------------------------------------------------------------------------------------
// Building blocks of a topology
// ---------------------------------------------------------------------------------------------

// One constructor argument of a JVM object; exactly one member is set.
union JavaObjectArg {
  1: i32 int_arg;
  2: i64 long_arg;
  3: string string_arg;
  4: bool bool_arg;
  5: binary binary_arg;
  6: double double_arg;
}

// A JVM class plus the arguments for its constructor.
struct JavaObject {
  1: required string full_class_name;
  2: required list<JavaObjectArg> args_list;
}

// Marker with no fields, used by the groupings that need no parameters.
struct NullStruct {
}

// Names one output stream of one component.
struct GlobalStreamId {
  1: required string componentId;
  2: required string streamId;
}

// How a stream's tuples are spread over the tasks of the consuming component.
union Grouping {
  // An empty list is the global grouping: every tuple goes to the lowest task id.
  1: list<string> fields;
  2: NullStruct shuffle;
  3: NullStruct all;
  4: NullStruct none;
  5: NullStruct direct;
  6: JavaObject custom_object;
  7: binary custom_serialized;
  8: NullStruct local_or_shuffle;
  // Squall addition (id >= 100, see the header). Storm's partialKeyGrouping: each key has two candidate
  // tasks and the emitter sends to the one it has sent fewer tuples so far. Storm ships it as a Java
  // object in custom_serialized, which a Squall worker cannot load; a member of its own lets nimbus check
  // the field names as it does for fields.
  100: list<string> partial_key;
}

// The declared fields of one output stream.
struct StreamInfo {
  1: required list<string> output_fields;
  2: required bool direct;
}

// A multilang component: the worker runs [execution_command, script] as a child process.
struct ShellComponent {
  1: string execution_command;
  2: string script;
}

// Squall: a component written in Python, imported and run inside the worker process itself.
struct PythonComponent {
  // Importable module path, e.g. "wordcount.bolts" ("module" is reserved in Thrift IDL).
  1: required string module_name;
  // Class inside that module, e.g. "WordCountBolt".
  2: required string class_name;
  // Positional constructor arguments as a JSON array; absent means none.
  3: optional string args_json;
  // Keyword constructor arguments as a JSON object; absent means none.
  4: optional string kwargs_json;
}

// What runs a component; exactly one member is set.
union ComponentObject {
  1: binary serialized_java;
  2: ShellComponent shell;
  3: JavaObject java_object;
  // Squall addition (id >= 100, see the header).
  100: PythonComponent python_object;
}

// What every spout and bolt declares besides its implementation.
struct ComponentCommon {
  1: required map<GlobalStreamId, Grouping> inputs;
  // Keyed by stream id.
  2: required map<string, StreamInfo> streams;
  // Number of executors; unset means 1.
  3: optional i32 parallelism_hint;
  // Per-component conf overrides as a JSON object.
  4: optional string json_conf;
}

struct SpoutSpec {
  1: required ComponentObject spout_object;
  2: required ComponentCommon common;
}

struct Bolt {
  1: required ComponentObject bolt_object;
  2: required ComponentCommon common;
}

// Kept for wire compatibility only; Squall does not run state spouts.
struct StateSpoutSpec {
  1: required ComponentObject state_spout_object;
  2: required ComponentCommon common;
}

// A whole topology. Component ids are unique across the three maps. The worker count is not
// here: it comes from topology.workers in the conf.
struct StormTopology {
  1: required map<string, SpoutSpec> spouts;
  2: required map<string, Bolt> bolts;
  3: required map<string, StateSpoutSpec> state_spouts;
  4: optional list<binary> worker_hooks;
  5: optional list<string> dependency_jars;
  6: optional list<string> dependency_artifacts;
  7: optional string storm_version;
  8: optional string jdk_version;
}

// ---------------------------------------------------------------------------------------------
// Errors. Each carries only a human-readable message.
// ---------------------------------------------------------------------------------------------

// A topology with that name is already running.
exception AlreadyAliveException {
  1: required string msg;
}

// No such topology (or, for internal calls, no such artifact of it).
exception NotAliveException {
  1: required string msg;
}

// The caller may not do this.
exception AuthorizationException {
  1: required string msg;
}

// The topology or conf is invalid, or the request does not fit the topology's current state.
exception InvalidTopologyException {
  1: required string msg;
}

// From JStorm: nimbus could not schedule the topology (no free slots, assignment timed out).
exception TopologyAssignException {
  1: required string msg;
}

// ---------------------------------------------------------------------------------------------
// Cluster and topology summaries
// ---------------------------------------------------------------------------------------------

struct TopologySummary {
  1: required string id;
  2: required string name;
  3: required i32 num_tasks;
  4: required i32 num_executors;
  5: required i32 num_workers;
  6: required i32 uptime_secs;
  // ACTIVE, INACTIVE, KILLED, REBALANCING; Squall also reports UPGRADING and ROLLBACK.
  7: required string status;
  // 5xx: Storm's scheduler and resource fields; Squall may leave them unset.
  513: optional string sched_status;
  514: optional string owner;
  515: optional i32 replication_count;
  521: optional double requested_memonheap;
  522: optional double requested_memoffheap;
  523: optional double requested_cpu;
  524: optional double assigned_memonheap;
  525: optional double assigned_memoffheap;
  526: optional double assigned_cpu;
}

struct SupervisorSummary {
  1: required string host;
  2: required i32 uptime_secs;
  // Number of slots (worker ports) the supervisor offers, and how many are in use.
  3: required i32 num_workers;
  4: required i32 num_used_workers;
  5: required string supervisor_id;
  6: optional string version = "VERSION_NOT_PROVIDED";
  7: optional map<string, double> total_resources;
  8: optional double used_mem;
  9: optional double used_cpu;
}

// One nimbus daemon. streamparse parses `version` to decide which calls it may use.
struct NimbusSummary {
  1: required string host;
  2: required i32 port;
  3: required i32 uptime_secs;
  4: required bool isLeader;
  5: required string version;
  // Storm 2.7's: the port of nimbus's TLS listener (nimbus.thrift.tls.port), unset when it has none.
  6: optional i32 tlsPort;
}

struct ClusterSummary {
  1: required list<SupervisorSummary> supervisors;
  // Deprecated but still declared: Storm 0.9/0.10 clients require it, newer ones ignore it.
  2: optional i32 nimbus_uptime_secs = 0;
  3: required list<TopologySummary> topologies;
  4: required list<NimbusSummary> nimbuses;
}

// One reported error; `error` is the stack trace text.
struct ErrorInfo {
  1: required string error;
  2: required i32 error_time_secs;
  3: optional string host;
  4: optional i32 port;
}

// An executor runs the tasks task_start..task_end (inclusive).
struct ExecutorInfo {
  1: required i32 task_start;
  2: required i32 task_end;
}

// Stats maps are keyed by time window first ("600", "10800", "86400", ":all-time").
struct BoltStats {
  1: required map<string, map<GlobalStreamId, i64>> acked;
  2: required map<string, map<GlobalStreamId, i64>> failed;
  3: required map<string, map<GlobalStreamId, double>> process_ms_avg;
  4: required map<string, map<GlobalStreamId, i64>> executed;
  5: required map<string, map<GlobalStreamId, double>> execute_ms_avg;
  // Squall: how many acks each process_ms_avg holds (process latency is sampled), so windows weigh it right.
  100: optional map<string, map<GlobalStreamId, i64>> processed;
}

struct SpoutStats {
  1: required map<string, map<string, i64>> acked;
  2: required map<string, map<string, i64>> failed;
  3: required map<string, map<string, double>> complete_ms_avg;
}

union ExecutorSpecificStats {
  1: BoltStats bolt;
  2: SpoutStats spout;
}

struct ExecutorStats {
  1: required map<string, map<string, i64>> emitted;
  2: required map<string, map<string, i64>> transferred;
  3: required ExecutorSpecificStats specific;
  4: required double rate;
  // Squall: failed tuples by why, keyed by window like the rest: "timeout" (a spout's tree timed out),
  // "explicit" (a bolt called fail; for a spout, a bolt failed its tree) and "exception" (a bolt's execute
  // raised). Their sum is the executor's failed count.
  100: optional map<string, map<string, i64>> failed_by_reason;
  // Squall: the task's user metrics (TopologyContext.register_*), as read at its latest heartbeat; not windowed.
  101: optional map<string, i64> user_counters;
  102: optional map<string, double> user_gauges;
}

struct ExecutorSummary {
  1: required ExecutorInfo executor_info;
  2: required string component_id;
  3: required string host;
  4: required i32 port;
  5: required i32 uptime_secs;
  // Id 6 is unused on the wire; leave it free.
  7: optional ExecutorStats stats;
  // Squall: the supervisor running the executor's worker (Storm has it in its WorkerSummary only).
  100: optional string supervisor_id;
}

struct DebugOptions {
  1: optional bool enable;
  2: optional double samplingpct;
}

struct TopologyInfo {
  1: required string id;
  2: required string name;
  3: required i32 uptime_secs;
  4: required list<ExecutorSummary> executors;
  5: required string status;
  // Recent errors, keyed by component id.
  6: required map<string, list<ErrorInfo>> errors;
  7: optional map<string, DebugOptions> component_debug;
  513: optional string sched_status;
  514: optional string owner;
  515: optional i32 replication_count;
  521: optional double requested_memonheap;
  522: optional double requested_memoffheap;
  523: optional double requested_cpu;
  524: optional double assigned_memonheap;
  525: optional double assigned_memoffheap;
  526: optional double assigned_cpu;
}

// ---------------------------------------------------------------------------------------------
// Options for lifecycle calls
// ---------------------------------------------------------------------------------------------

enum TopologyInitialStatus {
  ACTIVE = 1,
  INACTIVE = 2
}

// Accepted for compatibility; Squall does not use credentials.
struct Credentials {
  1: required map<string, string> creds;
}

struct SubmitOptions {
  1: required TopologyInitialStatus initial_status;
  2: optional Credentials creds;
}

struct KillOptions {
  // Seconds to stay deactivated before the topology is torn down.
  1: optional i32 wait_secs;
}

// Storm's ids win where JStorm used 2 and 3 for other fields.
struct RebalanceOptions {
  1: optional i32 wait_secs;
  2: optional i32 num_workers;
  // New executor counts, keyed by component id.
  3: optional map<string, i32> num_executors;
  // Id 4 belongs to Storm 2.x's resource overrides; Squall does not declare it, never reuse it.
  // Storm 2.x: conf keys to change, as a JSON object.
  5: optional string topology_conf_overrides;
  // Id 6 belongs to Storm 2.x's principal; never reuse it.
  // Squall (from JStorm): move every worker, not only the ones the new layout forces.
  100: optional bool reassign;
}

// Squall: parameters of a gray (canary) upgrade. Workers are picked by `workers` first, then by
// `component`, then by `worker_num`.
struct GrayUpgradeOptions {
  // Upgrade the workers that host this component's tasks.
  1: optional string component;
  // Explicit workers, each "host:port".
  2: optional list<string> workers;
  // Batch size; absent or 0 means no limit (with `component`: all of its workers).
  3: optional i32 worker_num;
  // How long the upgrade may stay open before it expires; absent means topology.upgrade.ttl.
  4: optional i64 ttl_ms;
}

// ---------------------------------------------------------------------------------------------
// Dynamic log levels (storm set_log_level)
// ---------------------------------------------------------------------------------------------

enum LogLevelAction {
  UNCHANGED = 1,
  UPDATE = 2,
  REMOVE = 3
}

// One logger's setting. UPDATE sets target_log_level (TRACE, DEBUG, INFO, WARN, ERROR, FATAL, OFF,
// ALL) for reset_log_level_timeout_secs (0: until removed); REMOVE puts the logger back as it was.
struct LogLevel {
  1: required LogLevelAction action;
  2: optional string target_log_level;
  3: optional i32 reset_log_level_timeout_secs;
  // Set by nimbus: when the setting expires, epoch milliseconds (as Storm's nimbus sets it).
  4: optional i64 reset_log_level_timeout_epoch;
  // The level after expiry; unset: the logger's own level from before the change.
  5: optional string reset_log_level;
}

// Keyed by logger name; "ROOT" is the root logger.
struct LogConfig {
  // Id 1 is unused in Storm's IDL too.
  2: optional map<string, LogLevel> named_logger_level;
}

// ---------------------------------------------------------------------------------------------
// Internal records for daemons
// ---------------------------------------------------------------------------------------------

// Latest heartbeat of one task. Times are 64-bit seconds (no 2038 overflow).
struct TaskHeartbeat {
  1: required i64 time_secs;
  2: required i32 uptime_secs;
  // Squall: the task's counters since it started, in the ":all-time" window (ids >= 100 are Squall's).
  100: optional ExecutorStats stats;
}

// Heartbeats of a topology's tasks, pushed to nimbus by its topology master.
struct TopologyTaskHbInfo {
  1: required string topologyId;
  2: required i32 topologyMasterId;
  // Keyed by task id.
  3: optional map<i32, TaskHeartbeat> taskHbs;
}

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

service Nimbus {
  // --- Storm 1.x calls: signatures frozen (see the header) ---

  // Storm returns nothing here; clients find the id with getClusterInfo.
  void submitTopology(1: string name, 2: string uploadedJarLocation, 3: string jsonConf,
                      4: StormTopology topology)
    throws (1: AlreadyAliveException e, 2: InvalidTopologyException ite,
            3: AuthorizationException aze);
  void submitTopologyWithOpts(1: string name, 2: string uploadedJarLocation, 3: string jsonConf,
                              4: StormTopology topology, 5: SubmitOptions options)
    throws (1: AlreadyAliveException e, 2: InvalidTopologyException ite,
            3: AuthorizationException aze);
  void killTopology(1: string name)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  void killTopologyWithOpts(1: string name, 2: KillOptions options)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  void activate(1: string name)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  void deactivate(1: string name)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  void rebalance(1: string name, 2: RebalanceOptions options)
    throws (1: NotAliveException e, 2: InvalidTopologyException ite,
            3: AuthorizationException aze);

  // Upload: beginFileUpload returns a location, uploadChunk appends to it, finishFileUpload
  // closes it; the location is then passed to submit as uploadedJarLocation.
  string beginFileUpload() throws (1: AuthorizationException aze);
  void uploadChunk(1: string location, 2: binary chunk) throws (1: AuthorizationException aze);
  void finishFileUpload(1: string location) throws (1: AuthorizationException aze);

  // Download: beginFileDownload returns a session id; downloadChunk returns the next piece and
  // an empty result at the end.
  string beginFileDownload(1: string file) throws (1: AuthorizationException aze);
  binary downloadChunk(1: string id) throws (1: AuthorizationException aze);

  // JSON text.
  string getNimbusConf() throws (1: AuthorizationException aze);
  ClusterSummary getClusterInfo() throws (1: AuthorizationException aze);
  NimbusSummary getLeader() throws (1: AuthorizationException aze);
  bool isTopologyNameAllowed(1: string name) throws (1: AuthorizationException aze);
  TopologyInfo getTopologyInfo(1: string id)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  // JSON text.
  string getTopologyConf(1: string id)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  // The topology as it runs, with system components (acker, topology master) added.
  StormTopology getTopology(1: string id)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  // The topology as submitted (after normalization).
  StormTopology getUserTopology(1: string id)
    throws (1: NotAliveException e, 2: AuthorizationException aze);

  // Dynamic log levels; `name` is a topology *id* (Storm's CLI resolves the name first). Merged
  // into what was set before; the topology's workers apply it and revert expired settings.
  void setLogConfig(1: string name, 2: LogConfig config);
  LogConfig getLogConfig(1: string name);

  // --- JStorm calls: JStorm's names and argument ids; Squall declares typed exceptions ---
  // InvalidTopologyException also means "not possible in the topology's current state",
  // e.g. no gray upgrade in progress.

  // Continue a gray upgrade with the next batch of workers.
  void grayUpgrade(1: string topologyName, 2: string component, 3: list<string> workers,
                   4: i32 workerNum)
    throws (1: NotAliveException e, 2: InvalidTopologyException ite,
            3: AuthorizationException aze);
  // Put the old code back on every upgraded worker and end the upgrade.
  void rollbackTopology(1: string topologyName)
    throws (1: NotAliveException e, 2: InvalidTopologyException ite,
            3: AuthorizationException aze);
  // Upgrade every remaining worker in one last batch; the upgrade completes once they all run it.
  void completeUpgrade(1: string topologyName)
    throws (1: NotAliveException e, 2: InvalidTopologyException ite,
            3: AuthorizationException aze);
  // Replace the code (when uploadedLocation is set) and merge updateConf (JSON) into the conf,
  // without restarting tasks.
  void updateTopology(1: string name, 2: string uploadedLocation, 3: string updateConf)
    throws (1: NotAliveException e, 2: InvalidTopologyException ite,
            3: AuthorizationException aze);
  // Kill and resubmit from the stored code, with jsonConf merged into the conf.
  void restart(1: string name, 2: string jsonConf)
    throws (1: NotAliveException e, 2: InvalidTopologyException ite,
            3: TopologyAssignException tae, 4: AuthorizationException aze);

  // Hosts whose supervisors get no new workers (running ones stay); nimbus keeps them in /blacklist.
  void setHostInBlackList(1: string host) throws (1: AuthorizationException aze);
  void removeHostOutBlackList(1: string host) throws (1: AuthorizationException aze);

  // The id of the alive topology with this name.
  string getTopologyId(1: string topologyName)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  TopologyInfo getTopologyInfoByName(1: string topologyName)
    throws (1: NotAliveException e, 2: AuthorizationException aze);

  // --- Squall calls ---

  // Start a gray upgrade of a running topology with newly uploaded code.
  void graySubmit(1: string name, 2: string uploadedJarLocation, 3: string jsonConf,
                  4: StormTopology topology, 5: GrayUpgradeOptions options)
    throws (1: NotAliveException e, 2: InvalidTopologyException ite,
            3: TopologyAssignException tae, 4: AuthorizationException aze);

  // Task heartbeats from a topology master; NotAliveException tells it the topology is gone.
  void updateTaskHeartbeat(1: TopologyTaskHbInfo taskHbs)
    throws (1: NotAliveException e, 2: AuthorizationException aze);

  // The blacklisted hosts (setHostInBlackList), sorted.
  list<string> getBlacklist() throws (1: AuthorizationException aze);

  // Supervisors fetch one stored artifact of a topology: "code" (the uploaded package), "conf"
  // (JSON) or "topology" (StormTopology, binary protocol); during a gray upgrade the new
  // version is "upgrade.code", "upgrade.conf", "upgrade.topology". Returns a session id read
  // with downloadChunk. NotAliveException: unknown topology, or no such artifact.
  string beginCodeDownload(1: string topologyId, 2: string artifact)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
}
