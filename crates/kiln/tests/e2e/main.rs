//! kiln's end-to-end tests, one binary: the `kiln` binary run against real targets, servers,
//! runtimes and browsers. One binary links once, and its tests take turns on the machine
//! through [`common::alone`] (tests that measure time: nothing beside them),
//! [`common::group`] (a module's timing tests that hold beside each other, two at once) and
//! [`common::beside`] (the others, several at once).

mod common;

mod capacity;
mod cli;
mod compare;
mod demo;
mod doctor;
mod export;
mod findings;
mod grpc;
mod hardening;
mod hedge;
mod hedge_run;
mod history;
mod http2;
mod k8s;
mod merge;
mod nginx;
mod plans;
mod prefork;
mod profile;
mod profile_runtimes;
mod queries_cli;
mod queries_java;
mod queries_python;
mod queries_spring;
mod receiver_hostile;
mod report;
mod runtime;
mod runtime_go;
mod shop;
mod watch;
mod wire;
