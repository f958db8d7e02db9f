// Package faultschedule runs fault schedules against a small service
// protected by idemkey (or by a broken stand-in built to be caught) and
// checks what happened with storm.CheckSchedule.
//
// A run starts everything itself on loopback: a private redis-server (in
// the persistence mode the schedule asks for), two or three instances of a
// test service in this process, each reaching Redis through its own
// faultproxy, a storm in load mode sending to the instances in turn and
// writing its history, and a nemesis that applies the schedule's faults
// while the storm runs, each logged with its time. Every side effect the
// service makes is one line of a ledger: JSON Lines, fsynced, written
// outside Redis, with the key, the execution id, the fencing token (the
// store's attempt), when it ran and, on a line of its own, the refusal of
// its completion when the store refused it. The history, the ledger, the
// faults and the mismatch probes sent after the storm are then judged by
// storm.CheckSchedule.
//
// The instances live in this process by default: a kill -9 is then
// emulated by freezing the instance's handlers where they are, cutting its
// connections to Redis and to its clients, and starting a fresh instance
// in its place; a SIGSTOP by freezing its handlers and its connections to
// Redis until it is continued; both wait until every run in flight is
// before its side effect. With Config.Processes each instance is a
// process of its own (this package's test binary started again, see
// ChildMain), and a pause is a real SIGSTOP and SIGCONT, a kill a real
// SIGKILL, wherever the instance is. Schedules are random from a seed
// (Random), printed by the tests; IDEMKEY_SEED=N replays one. The toy
// guard (Toy) and its planted bugs are the controls the checker must
// catch. docs/reliability.md has the method and the measured table.
package faultschedule
