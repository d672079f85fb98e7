//! Every end-to-end test of the tests crate in one binary, linked once (issue 43: 35
//! binaries that each linked terrace's API server, simulator and clients took minutes of
//! CI to link). Each file of this folder is a module and keeps its own name, so a test is
//! `FILE::NAME`: `cargo test -p terrace-tests --test e2e health::` runs one file's tests,
//! and `.config/nextest.toml` finds the real-cluster and real-node tiers by the `real_`
//! prefix of their modules. cargo-nextest still runs each test in a process of its own.

mod automatic_test_runs;
mod chart_settings;
mod cli_commands;
mod cli_module_tests;
mod cli_runs;
mod cli_state;
mod dev;
mod docs;
mod durability;
mod examples;
mod health;
mod history;
mod layout;
mod least_privilege;
mod logs;
mod module_tests;
mod notifications;
mod policies;
mod readme;
mod real_cluster;
mod real_cluster_apiserver_restart;
mod real_cluster_authorization;
mod real_cluster_history;
mod real_cluster_policies;
mod real_cluster_replicas;
mod real_cluster_restart;
mod real_cluster_ui;
mod real_node;
mod real_node_chart;
mod registry;
mod s3_blobs;
mod slow_connections;
mod ui_browser;
mod vcs;
mod workspaces;
