//! Flags: pflag-style parsing, defaults, the mode choosing sync-period flags, flag errors.

use std::path::Path;
use std::time::Duration;

use super::*;

#[test]
fn flags_parse_in_pflag_style() {
    let f = parse(&[
        "--proxy-mode=nftables",
        "--hostname-override",
        "node-a",
        "--masquerade-all",
        "--iptables-localhost-nodeports=false",
        "--cleanup=F",
        "-v=4",
        "--nodeport-addresses=10.0.0.0/8,primary",
        "--nodeport-addresses",
        "localhost",
        "--feature-gates=AllAlpha=false,ComponentFlagz=true",
        "--iptables-sync-period=1m30s",
        "--oom-score-adj",
        "-500",
        "--version",
    ]);
    assert_eq!(f.proxy_mode.as_deref(), Some("nftables"));
    assert_eq!(f.hostname_override.as_deref(), Some("node-a"));
    assert_eq!(f.masquerade_all, Some(true));
    assert_eq!(f.iptables_localhost_nodeports, Some(false));
    assert_eq!(f.cleanup, Some(false));
    assert_eq!(f.verbosity, Some(4));
    assert_eq!(
        f.nodeport_addresses,
        Some(vec![
            "10.0.0.0/8".into(),
            "primary".into(),
            "localhost".into()
        ])
    );
    assert_eq!(f.feature_gates.as_ref().map(Vec::len), Some(2));
    assert_eq!(f.iptables_sync_period, Some(secs(90)));
    assert_eq!(f.oom_score_adj, Some(-500));
    assert_eq!(f.version_requested(), Some(VersionStyle::Short));
    assert_eq!(f.init_only, None);
    for v in [["--v=2"].as_slice(), &["--v", "2"], &["-v", "2"], &["-v2"]] {
        assert_eq!(parse(v).verbosity, Some(2), "{v:?}");
    }
}

#[test]
fn flags_flatten_into_a_subcommand_and_bools_do_not_swallow_it() {
    let cli =
        Cli::try_parse_from(["kp", "--cleanup", "plan", "--proxy-mode", "ipvs", "-v=3"]).unwrap();
    assert_eq!(cli.flags.cleanup, Some(true));
    let Some(Command::Plan { flags }) = cli.command else {
        panic!("no plan subcommand")
    };
    assert_eq!(flags.proxy_mode.as_deref(), Some("ipvs"));
    assert_eq!(flags.verbosity, Some(3));
    let err = Cli::try_parse_from(["kp", "--iptables-sync-period=30"]).unwrap_err();
    assert!(err.to_string().contains("missing unit"), "{err}");
}

#[test]
fn changed_lists_only_given_flags() {
    let f = parse(&["--masquerade-all=false", "-v=1", "--config=/x"]);
    let got: Vec<_> = f.changed().into_iter().collect();
    assert_eq!(got, ["config", "masquerade-all", "v"]);
}

#[test]
fn no_flags_and_no_file_give_upstream_defaults() {
    let r = from_flags(&[]).unwrap();
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let c = r.config;
    assert_eq!(c, Config::default());
    assert_eq!((c.mode, c.mode_explicit), (ProxyMode::Iptables, false));
    assert_eq!((c.sync_period, c.min_sync_period), (secs(30), secs(1)));
    assert_eq!(
        (c.masquerade_bit, c.masquerade_all, c.localhost_node_ports),
        (14, false, true)
    );
    assert_eq!(c.healthz_bind_address, Some(addr("0.0.0.0:10256")));
    assert_eq!(c.metrics_bind_address, addr("127.0.0.1:10249"));
    assert_eq!(
        c.node_port_addresses,
        NodePortAddresses {
            all: true,
            ..Default::default()
        }
    );
    assert_eq!(c.oom_score_adj, -999);
    assert_eq!((c.conntrack.max_per_core, c.conntrack.min), (32768, 131072));
    assert_eq!(c.conntrack.tcp_established_timeout, secs(86400));
    assert_eq!(c.conntrack.tcp_close_wait_timeout, secs(3600));
    assert_eq!(c.config_sync_period, secs(900));
    assert_eq!((c.client.qps, c.client.burst), (5.0, 10));
    assert_eq!(c.client.content_type, "application/vnd.kubernetes.protobuf");
    assert!(c.gate("NFTablesProxyMode"));
    assert_eq!((c.logging.format, c.verbosity()), (LogFormat::Text, 0));
}

#[test]
fn flags_choose_the_sync_period_flags_by_mode() {
    let ipvs = from_flags(&[
        "--proxy-mode=ipvs",
        "--ipvs-sync-period=45s",
        "--ipvs-min-sync-period=0s",
        "--iptables-sync-period=1m",
    ])
    .unwrap();
    assert_eq!(
        (ipvs.config.sync_period, ipvs.config.min_sync_period),
        (secs(45), Duration::ZERO)
    );
    assert_eq!(
        ipvs.warnings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["--iptables-sync-period is ignored: it applies to iptables and nftables mode, not ipvs"]
    );
    let nft = from_flags(&[
        "--proxy-mode=nftables",
        "--iptables-sync-period=1m",
        "--iptables-min-sync-period=5s",
        "--iptables-masquerade-bit=3",
        "--masquerade-all",
    ])
    .unwrap();
    let c = &nft.config;
    assert_eq!((c.mode, c.mode_explicit), (ProxyMode::Nftables, true));
    assert_eq!((c.sync_period, c.min_sync_period), (secs(60), secs(5)));
    assert_eq!((c.masquerade_bit, c.masquerade_all), (14, true));
    assert_eq!(
        c.node_port_addresses,
        NodePortAddresses {
            primary: true,
            ..Default::default()
        }
    );
    assert_eq!(
        nft.warnings[0].to_string(),
        "--iptables-masquerade-bit is ignored: nftables mode takes its masquerade bit only from the config file"
    );
}

#[test]
fn flags_fill_the_config() {
    let r = from_flags(&[
        "--cluster-cidr=10.244.1.0/16,fd00::/64",
        "--bind-address=::",
        "--healthz-bind-address=",
        "--metrics-bind-address=0.0.0.0",
        "--detect-local-mode=BridgeInterface",
        "--pod-bridge-interface=cbr0",
        "--feature-gates=AllowServiceExternalIPs=false",
        "--ipvs-scheduler=wrr",
        "--manifests=/srv/m",
        "--master=https://10.0.0.1:6443",
        "--hostname-override= Node-A ",
        "--logging-format=json",
        "--write-config-to=/tmp/out.yaml",
        "--nftables-encoder=nft",
    ])
    .unwrap();
    let c = &r.config;
    assert_eq!(
        c.cluster_cidrs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["10.244.0.0/16", "fd00::/64"]
    );
    assert_eq!(c.bind_address, "::".parse::<std::net::IpAddr>().unwrap());
    assert_eq!(c.healthz_bind_address, None);
    assert_eq!(c.metrics_bind_address, addr("0.0.0.0:10249"));
    assert_eq!(c.detect_local_mode, DetectLocalMode::BridgeInterface);
    assert_eq!(c.detect_local.bridge_interface, "cbr0");
    assert!(!c.gate("AllowServiceExternalIPs"));
    assert_eq!(c.manifests.as_deref(), Some(Path::new("/srv/m")));
    assert_eq!(c.client.master.as_deref(), Some("https://10.0.0.1:6443"));
    assert_eq!(c.hostname_override.as_deref(), Some("node-a"));
    assert_eq!(c.logging.format, LogFormat::Json);
    assert_eq!(c.nftables_encoder, crate::config::NftablesEncoder::Nft);
    assert_eq!(
        c.write_config_to.as_deref(),
        Some(Path::new("/tmp/out.yaml"))
    );
    assert_eq!(
        r.warnings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        Vec::<String>::new(),
        "the ipvs flags are acted on"
    );
}

#[test]
fn upstreams_logging_flags_are_accepted_and_win_over_the_file() {
    let file = format!(
        "{HEADER}logging:\n  flushFrequency: 2s\n  vmodule:\n  - {{filePattern: server, verbosity: 2}}\n"
    );
    let r = from_file(
        &[
            "--vmodule=proxier=4",
            "--log-flush-frequency=10s",
            "--log-text-split-stream",
            "--log-json-info-buffer-size=2Ki",
        ],
        &file,
    )
    .unwrap();
    let log = &r.config.logging;
    assert_eq!(
        log.vmodule,
        serde_json::json!([
            {"filePattern": "server", "verbosity": 2},
            {"filePattern": "proxier", "verbosity": 4},
        ]),
        "--vmodule adds to the file's list, as upstream's does"
    );
    assert_eq!(log.flush_frequency, secs(10));
    assert_eq!(
        log.options,
        serde_json::json!({"text": {"splitStream": true}, "json": {"infoBufferSize": "2Ki"}})
    );
    let warnings: Vec<String> = r.warnings.iter().map(ToString::to_string).collect();
    assert!(
        warnings.iter().all(|w| !w.contains("is ignored")),
        "logging flags are honoured beside --config: {warnings:?}"
    );
    assert_eq!(
        warnings,
        [
            "logging.flushFrequency is accepted but not acted on: every log line is written at \
             once, unbuffered",
            "logging.vmodule is accepted but not acted on: -v applies to every source file",
            "logging.options.text.splitStream is accepted but not acted on: every log line goes \
             to stderr",
            "logging.options.json.infoBufferSize is accepted but not acted on: every log line is \
             written at once, unbuffered",
        ]
    );
    let r = from_flags(&["--vmodule=proxier=4"]).unwrap();
    assert_eq!(
        r.warnings[0].to_string(),
        "--vmodule is accepted but not acted on: -v applies to every source file"
    );
}

#[test]
fn the_deprecated_port_flags_act_as_upstreams() {
    let deprecated = "--healthz-port is deprecated; use --healthz-bind-address";
    let r = from_flags(&["--healthz-port=0"]).unwrap();
    assert_eq!(
        r.config.healthz_bind_address, None,
        "0 turns the server off"
    );
    assert_eq!(r.warnings[0].to_string(), deprecated);
    let r = from_flags(&[
        "--healthz-bind-address=127.0.0.1",
        "--healthz-port=9000",
        "--metrics-bind-address=0.0.0.0",
        "--metrics-port=9001",
    ])
    .unwrap();
    assert_eq!(r.config.healthz_bind_address, Some(addr("127.0.0.1:9000")));
    assert_eq!(r.config.metrics_bind_address, addr("0.0.0.0:9001"));
    let r = from_flags(&["--metrics-port=9001", "--healthz-port=9000"]).unwrap();
    assert_eq!(
        r.config.metrics_bind_address,
        addr("127.0.0.1:10249"),
        "an address with a port keeps it"
    );
    assert_eq!(r.config.healthz_bind_address, Some(addr("0.0.0.0:10256")));
    let r = from_flags(&["--healthz-port=0", "--write-config-to=/tmp/kp.yaml"]).unwrap();
    assert_eq!(
        r.config.healthz_bind_address,
        Some(addr("0.0.0.0:10256")),
        "upstream ignores them when writing the configuration"
    );
    assert_eq!(r.warnings[0].to_string(), deprecated);
}

#[test]
fn flag_errors_are_one_line_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--iptables-masquerade-bit=40"],
            "--iptables-masquerade-bit: must be between 0 and 31, got 40",
        ),
        (
            &["--oom-score-adj=2000"],
            "--oom-score-adj: must be between -1000 and 1000, got 2000",
        ),
        (
            &["--kube-api-burst=-1"],
            "--kube-api-burst: must be 0 or more, got -1",
        ),
        (
            &["--kube-api-qps=-1"],
            "--kube-api-qps: must be a number 0 or more, got -1",
        ),
        (
            &["--conntrack-max-per-core=-1"],
            "--conntrack-max-per-core: must be 0 or more, got -1",
        ),
        (
            &["--iptables-sync-period=0s"],
            "--iptables-sync-period: must be greater than 0s",
        ),
        (
            &["--iptables-sync-period=1s", "--iptables-min-sync-period=2s"],
            "--iptables-sync-period: must be at least --iptables-min-sync-period (2s), got 1s",
        ),
        (
            &["--config-sync-period=0s"],
            "--config-sync-period: must be greater than 0s",
        ),
        (
            &["--proxy-mode=kernelspace"],
            "--proxy-mode: kernelspace is the windows proxy mode; on linux use iptables, ipvs, nftables, userspace or ebpf",
        ),
        (
            &["--detect-local-mode=Bridge"],
            "--detect-local-mode: must be ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix or empty (ClusterCIDR), got \"Bridge\"",
        ),
        (
            &["--detect-local-mode=BridgeInterface"],
            "--pod-bridge-interface: must not be empty when detect-local mode is BridgeInterface",
        ),
        (
            &["--bind-address=node-a"],
            "--bind-address: must be an ip address (e.g. 0.0.0.0 or ::), got \"node-a\"",
        ),
        (
            &["--healthz-bind-address=:10256"],
            "--healthz-bind-address: must be ip:port (e.g. 0.0.0.0:10256 or [::]:10256), got \":10256\"",
        ),
        (
            &["--metrics-bind-address="],
            "--metrics-bind-address: must be ip:port (e.g. 0.0.0.0:10249 or [::]:10249), got \"\"",
        ),
        (
            &["--cluster-cidr=10.0.0.0/8,fd00::/64,fd01::/64"],
            "--cluster-cidr: must be one cidr or an ipv4,ipv6 pair",
        ),
        (
            &["--nodeport-addresses=10.0.0.0/8,lo"],
            "--nodeport-addresses: entries must be cidrs or the keywords primary, localhost, all, got \"lo\"",
        ),
        (
            &["--ipvs-exclude-cidrs=10.0.0.0"],
            "--ipvs-exclude-cidrs: must be a cidr",
        ),
        (
            &["--feature-gates=Nope=true"],
            "--feature-gates: Nope: unknown feature gate; known gates: AllAlpha,",
        ),
        (
            &["--feature-gates=TopologyAwareHints=false"],
            "--feature-gates: TopologyAwareHints: feature gate is GA and locked to true",
        ),
        (
            &["--feature-gates=ComponentFlagz"],
            "--feature-gates: \"ComponentFlagz\" is not Name=true or Name=false",
        ),
        (
            &["--show-hidden-metrics-for-version=1"],
            "--show-hidden-metrics-for-version: must be empty or major.minor (e.g. 1.36), got \"1\"",
        ),
        (
            &["--hostname-override=  "],
            "--hostname-override: must not be blank",
        ),
        (
            &["--logging-format=xml"],
            "--logging-format: must be text or json, got \"xml\"",
        ),
        (
            &["--kube-api-content-type=text/plain"],
            "--kube-api-content-type: must be application/vnd.kubernetes.protobuf or application/json, got \"text/plain\"",
        ),
        (
            &["--nftables-encoder=libnftnl"],
            "--nftables-encoder: must be netlink or nft, got \"libnftnl\"",
        ),
        (
            &["--udp-timeout=0s"],
            "--udp-timeout: must be greater than 0s",
        ),
        (
            &["--userspace-max-connections=0"],
            "--userspace-max-connections: must be 1 or more, got 0",
        ),
        (
            &["--userspace-max-connections-per-service=-3"],
            "--userspace-max-connections-per-service: must be 0 or more, got -3",
        ),
        (&["--proxy-port-range=9-3"], "--proxy-port-range: "),
        (
            &["--vmodule=proxier"],
            "--vmodule: must be pattern=N entries separated by commas, got \"proxier\"",
        ),
        (
            &["--log-flush-frequency=0s"],
            "--log-flush-frequency: must be greater than 0s",
        ),
        (
            &["--metrics-port=0"],
            "--metrics-port: 0 would leave the metrics server without an address; give 1 to 65535",
        ),
        (
            &["--healthz-bind-address=127.0.0.1", "--healthz-port=70000"],
            "--healthz-port: must be between 1 and 65535, got 70000",
        ),
    ];
    for (args, want) in cases {
        let err = from_flags(args).expect_err(want).to_string();
        assert!(err.starts_with(want), "\n got: {err}\nwant: {want}");
        assert!(!err.contains('\n') && !err.ends_with('.'), "{err:?}");
    }
}

#[test]
fn userspace_flags_fill_the_relay_settings_also_beside_a_file() {
    let r = from_flags(&[
        "--proxy-mode=userspace",
        "--proxy-port-range=30000-30100",
        "--udp-timeout=2s",
        "--userspace-max-connections=500",
        "--userspace-max-connections-per-service=50",
    ])
    .unwrap();
    let c = &r.config;
    assert_eq!(c.port_range, "30000-30100");
    assert_eq!(c.userspace.udp_idle_timeout, Duration::from_secs(2));
    assert_eq!(c.userspace.max_connections, 500);
    assert_eq!(c.userspace.max_connections_per_service, 50);
    let defaults = from_flags(&["--proxy-mode=userspace"]).unwrap().config;
    assert_eq!(defaults.userspace, crate::config::Userspace::default());
    assert!(crate::config::HONOURED_WITH_CONFIG.contains(&"udp-timeout"));
}
