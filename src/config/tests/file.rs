//! The configuration file: upstream-shaped files accepted, warnings, every field error.

use super::*;

#[test]
fn a_kubeadm_generated_config_is_accepted_with_upstream_defaults() {
    let r = from_file(
        &[],
        include_str!("../../../tests/fixtures/config/kubeadm.yaml"),
    )
    .unwrap();
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let defaults = Config::default();
    let want = Config {
        config_file: Some("/etc/kp.yaml".into()),
        client: ClientConnection {
            kubeconfig: Some("/var/lib/kube-proxy/kubeconfig.conf".into()),
            ..defaults.client.clone()
        },
        cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap()],
        logging: Logging {
            options: serde_json::json!({"json": {"infoBufferSize": "0"}, "text": {"infoBufferSize": "0"}}),
            ..defaults.logging.clone()
        },
        ..defaults
    };
    assert_eq!(r.config, want);
}

#[test]
fn a_json_nftables_config_uses_the_nftables_section() {
    let r = from_file(
        &[],
        include_str!("../../../tests/fixtures/config/nftables.json"),
    )
    .unwrap();
    let c = &r.config;
    assert_eq!(
        (c.mode, c.sync_period, c.min_sync_period),
        (ProxyMode::Nftables, secs(60), secs(2))
    );
    assert_eq!((c.masquerade_bit, c.masquerade_all), (10, true));
    assert_eq!(c.cluster_cidrs.len(), 2);
    assert_eq!(
        c.node_port_addresses,
        NodePortAddresses {
            primary: true,
            localhost: true,
            ..Default::default()
        }
    );
    assert!(c.gate("KubeProxyNFTablesLocalhostNodePorts"));
    assert_eq!((c.client.qps, c.client.burst), (20.0, 40));
    assert_eq!((c.conntrack.max_per_core, c.conntrack.min), (0, 131072));
    assert!(c.conntrack.tcp_be_liberal);
    assert_eq!(c.conntrack.udp_timeout, secs(30));
    assert_eq!(
        (c.logging.format, c.logging.verbosity),
        (LogFormat::Json, 2)
    );
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
}

#[test]
fn fields_not_acted_on_warn_by_path_with_the_reason() {
    let r = file_body(
        "portRange: 30000-32767\nipvs:\n  strictARP: true\nwinkernel:\n  networkName: l2bridge\n",
    )
    .unwrap();
    assert_eq!(
        r.warnings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [
            "winkernel.networkName is accepted but not acted on: Windows only",
            "portRange is accepted but not acted on (outside userspace mode): only userspace \
             mode opens listeners",
        ]
    );
}

/// As upstream's loadConfig: a strict decoding error (an unknown or duplicate field) is logged
/// and the file read leniently, so a file written for a newer release still starts the proxy.
#[test]
fn unknown_and_duplicate_fields_are_read_leniently_with_a_warning() {
    let r = file_body(
        "masqueradeAll: true\nmode: ipvs\niptables:\n  masqueradeALL: true\n  masqueradeBit: 12\n\
         newerSection: {anything: [1, 2]}\n",
    )
    .unwrap();
    assert_eq!(r.config.mode, ProxyMode::Ipvs);
    assert_eq!(r.config.masquerade_bit, 12);
    assert!(!r.config.masquerade_all, "an unknown field sets nothing");
    let warnings: Vec<String> = r.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "config file /etc/kp.yaml: strict decoding failed (iptables.masqueradeALL: unknown \
             field; accepted here: localhostNodePorts, masqueradeAll,"
        ),
        "{}",
        warnings[0]
    );
    assert!(
        warnings[0]
            .ends_with("read leniently: unknown fields ignored, the last of duplicate keys kept"),
        "{}",
        warnings[0]
    );

    let r = file_body("mode: ipvs\nmode: nftables\n").unwrap();
    assert_eq!(
        r.config.mode,
        ProxyMode::Nftables,
        "the last duplicate wins"
    );
    assert!(
        r.warnings[0]
            .to_string()
            .contains("strict decoding failed (duplicate mapping key: mode at line 4, column 1)"),
        "{:?}",
        r.warnings
    );

    let json = r#"{"apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration", "mode": "nftables", "nftables": {"future": 1}}"#;
    let r = from_file(&[], json).unwrap();
    assert_eq!(r.config.mode, ProxyMode::Nftables);
    assert!(
        r.warnings[0]
            .to_string()
            .contains("nftables.future: unknown field"),
        "{:?}",
        r.warnings
    );

    let strict = file_body("mode: nftables\n").unwrap();
    assert!(strict.warnings.is_empty(), "{:?}", strict.warnings);
}

#[test]
fn userspace_mode_takes_the_iptables_section_and_acts_on_port_range() {
    let r = file_body(
        "mode: userspace\nportRange: 30000-30100\niptables:\n  syncPeriod: 1m\n  minSyncPeriod: 3s\n",
    )
    .unwrap();
    let c = &r.config;
    assert_eq!(
        (c.mode, c.sync_period, c.min_sync_period),
        (ProxyMode::Userspace, secs(60), secs(3))
    );
    assert_eq!(c.port_range, "30000-30100");
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
}

#[test]
fn file_errors_are_one_line_naming_the_field() {
    let p = "config file /etc/kp.yaml: ";
    let cases: &[(&str, &str)] = &[
        (
            "iptables:\n  masqueradeBit: 32\n",
            "iptables.masqueradeBit: must be between 0 and 31, got 32",
        ),
        (
            "mode: nftables\nnftables:\n  masqueradeBit: -1\n",
            "nftables.masqueradeBit: must be between 0 and 31, got -1",
        ),
        (
            "oomScoreAdj: -1001\n",
            "oomScoreAdj: must be between -1000 and 1000, got -1001",
        ),
        (
            "clientConnection:\n  burst: -1\n",
            "clientConnection.burst: must be 0 or more, got -1",
        ),
        (
            "clientConnection:\n  qps: -2\n",
            "clientConnection.qps: must be a number 0 or more, got -2",
        ),
        (
            "conntrack:\n  min: -5\n",
            "conntrack.min: must be 0 or more, got -5",
        ),
        (
            "conntrack:\n  udpTimeout: -5s\n",
            "conntrack.udpTimeout: invalid duration \"-5s\": must not be negative",
        ),
        (
            "iptables:\n  syncPeriod: 1s\n  minSyncPeriod: 2s\n",
            "iptables.syncPeriod: must be at least iptables.minSyncPeriod (2s), got 1s",
        ),
        (
            "mode: ipvs\nipvs:\n  syncPeriod: 10s\n  minSyncPeriod: 1m\n",
            "ipvs.syncPeriod: must be at least ipvs.minSyncPeriod (1m0s), got 10s",
        ),
        (
            "iptables:\n  syncPeriod: 30\n",
            "iptables.syncPeriod: invalid type: number `30`, expected a duration string such as 30s or 1h0m0s",
        ),
        (
            "configSyncPeriod: 15 minutes\n",
            "configSyncPeriod: invalid duration \"15 minutes\": unknown unit \" minutes\"; use ns, us, ms, s, m or h",
        ),
        (
            "mode: xdp\n",
            "mode: must be iptables, ipvs, nftables, userspace, ebpf or empty (iptables), got \"xdp\"",
        ),
        (
            "mode: kernelspace\n",
            "mode: kernelspace is the windows proxy mode; on linux use iptables, ipvs, nftables, userspace or ebpf",
        ),
        (
            "detectLocalMode: PodCIDR\n",
            "detectLocalMode: must be ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix or empty (ClusterCIDR), got \"PodCIDR\"",
        ),
        (
            "detectLocalMode: InterfaceNamePrefix\n",
            "detectLocal.interfaceNamePrefix: must not be empty when detect-local mode is InterfaceNamePrefix",
        ),
        (
            "bindAddress: 0.0.0.0:80\n",
            "bindAddress: must be an ip address (e.g. 0.0.0.0 or ::), got \"0.0.0.0:80\"",
        ),
        (
            "healthzBindAddress: localhost:10256\n",
            "healthzBindAddress: must be ip:port (e.g. 0.0.0.0:10256 or [::]:10256), got \"localhost:10256\"",
        ),
        (
            "metricsBindAddress: 127.0.0.1:70000\n",
            "metricsBindAddress: must be ip:port (e.g. 0.0.0.0:10249 or [::]:10249), got \"127.0.0.1:70000\"",
        ),
        (
            "clusterCIDR: 10.0.0.0/8,10.1.0.0/16\n",
            "clusterCIDR: must be one cidr or an ipv4,ipv6 pair (e.g. 10.244.0.0/16,fd00:10::/56), got \"10.0.0.0/8,10.1.0.0/16\"",
        ),
        (
            "clusterCIDR: 10.0.0.0/33\n",
            "clusterCIDR: must be a cidr (e.g. 10.244.0.0/16 or fd00:10::/56), got \"10.0.0.0/33\"",
        ),
        (
            "nodePortAddresses: [primary, eth0]\n",
            "nodePortAddresses: entries must be cidrs or the keywords primary, localhost, all, got \"eth0\"",
        ),
        (
            "ipvs:\n  excludeCIDRs: [10.0.0.1]\n",
            "ipvs.excludeCIDRs: must be a cidr (e.g. 10.244.0.0/16 or fd00:10::/56), got \"10.0.0.1\"",
        ),
        (
            "featureGates:\n  NoSuchGate: true\n",
            "featureGates.NoSuchGate: unknown feature gate; known gates: AllAlpha, AllBeta,",
        ),
        (
            "featureGates:\n  NFTablesProxyMode: false\n",
            "featureGates.NFTablesProxyMode: feature gate is GA and locked to true; remove it or set it to true",
        ),
        (
            "featureGates:\n  ComponentFlagz: \"true\"\n",
            "featureGates.ComponentFlagz: invalid type: string \"true\", expected true or false",
        ),
        (
            "logging:\n  format: xml\n",
            "logging.format: must be text or json, got \"xml\"",
        ),
        (
            "clientConnection:\n  contentType: application/yaml\n",
            "clientConnection.contentType: must be application/vnd.kubernetes.protobuf or application/json, got \"application/yaml\"",
        ),
        (
            "logging:\n  verbosity: -1\n",
            "logging.verbosity: must be between 0 and 2147483647, got -1",
        ),
        (
            "portRange: 10-5\n",
            "portRange: must be empty, a port, low-high or base+size (e.g. 30000-32767), got \"10-5\"",
        ),
        (
            "showHiddenMetricsForVersion: latest\n",
            "showHiddenMetricsForVersion: must be empty or major.minor (e.g. 1.36), got \"latest\"",
        ),
        (
            // Lenient decoding does not hide a wrong type after an unknown field.
            "iptables:\n  masqueradeALL: true\nmode: [nftables]\n",
            "mode: invalid type: sequence, expected a string",
        ),
        (
            "mode: ipvs\nmode: nftables\niptables: {masqueradeBit: 40}\n",
            "iptables.masqueradeBit: must be between 0 and 31, got 40",
        ),
        (
            "iptables:\n  masqueradeBit: fourteen\n",
            "iptables.masqueradeBit: invalid type: string \"fourteen\", expected i64",
        ),
        (
            "iptables:\n  masqueradeAll: \"true\"\n",
            "iptables.masqueradeAll: invalid type: string \"true\", expected a boolean",
        ),
        (
            "hostnameOverride: [a]\n",
            "hostnameOverride: invalid type: sequence, expected a string",
        ),
        (
            "iptables: true\n",
            "iptables: value must be a mapping, got boolean `true`",
        ),
        (
            "mode: ipvs\n  bad: indentation\n",
            "mapping values are not allowed",
        ),
    ];
    for (body, want) in cases {
        let err = file_body(body).expect_err(body).to_string();
        assert!(
            err.starts_with(&format!("{p}{want}")),
            "\n got: {err}\nwant: {p}{want}"
        );
        assert!(!err.contains('\n') && !err.ends_with('.'), "{err:?}");
    }
}

#[test]
fn the_document_must_be_a_v1alpha1_kube_proxy_configuration() {
    let cases: &[(&str, &str)] = &[
        (
            "",
            "apiVersion: missing; must be kubeproxy.config.k8s.io/v1alpha1",
        ),
        (
            "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\n",
            "apiVersion: must be kubeproxy.config.k8s.io/v1alpha1, got \"kubeproxy.config.k8s.io/v1alpha2\"",
        ),
        (
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n",
            "kind: must be KubeProxyConfiguration, got \"KubeletConfiguration\"",
        ),
        ("- a\n", "the document must be a mapping, got sequence"),
        (
            "mode: [iptables\n",
            "unclosed bracket '[' at line 1, column 7",
        ),
    ];
    for (text, want) in cases {
        let err = from_file(&[], text).expect_err(text).to_string();
        assert_eq!(err, format!("config file /etc/kp.yaml: {want}"));
    }
}
