//! `--write-config-to`: rendering and reading back.

use super::*;

/// Configurations whose rendering must read back unchanged.
fn round_trip_cases() -> Vec<Config> {
    let base = Config::default();
    let mut cases = vec![base.clone()];
    let mut nft = from_file(
        &[],
        include_str!("../../../tests/fixtures/config/nftables.json"),
    )
    .unwrap()
    .config;
    nft.config_file = None;
    cases.push(nft);
    let mut c = from_flags(&[
        "--proxy-mode=ipvs",
        "--ipvs-sync-period=10s",
        "--ipvs-min-sync-period=0s",
        "--ipvs-scheduler=wrr",
        "--ipvs-exclude-cidrs=10.1.0.0/16",
        "--iptables-masquerade-bit=5",
        "--nodeport-addresses=192.168.0.0/16,all",
        "--bind-address=fd00::1",
        "--metrics-bind-address=[::]:9999",
        "--detect-local-mode=InterfaceNamePrefix",
        "--pod-interface-name-prefix=veth",
        "--show-hidden-metrics-for-version=1.36",
        "--feature-gates=AllAlpha=true,ComponentFlagz=false",
        "--conntrack-tcp-timeout-established=0s",
        "--kubeconfig=/k.conf",
        "--hostname-override=n1",
    ])
    .unwrap()
    .config;
    c.logging.vmodule = serde_json::json!([{"filePattern": "proxier*", "verbosity": 5}]);
    c.port_range = "1000".into();
    c.winkernel.network_name = "y".into();
    cases.push(c);
    let mut userspace = from_flags(&[
        "--proxy-mode=userspace",
        "--iptables-sync-period=45s",
        "--iptables-min-sync-period=2s",
        "--bind-address=10.0.0.1",
    ])
    .unwrap()
    .config;
    userspace.port_range = "30000-30100".into();
    cases.push(userspace);
    cases
}

#[test]
fn render_then_resolve_gives_the_same_config() {
    for want in round_trip_cases() {
        let text = render(&want);
        let mut got = from_file(&[], &text)
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
            .config;
        got.config_file = None;
        assert_eq!(got, want, "\n{text}");
    }
}

#[test]
fn render_writes_every_field_like_upstream() {
    let text = render(&Config::default());
    for line in [
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n",
        "kind: KubeProxyConfiguration\n",
        "bindAddress: \"0.0.0.0\"\n",
        "configSyncPeriod: 15m0s\n",
        "  tcpEstablishedTimeout: 24h0m0s\n",
        "  tcpCloseWaitTimeout: 1h0m0s\n",
        "healthzBindAddress: 0.0.0.0:10256\n",
        "metricsBindAddress: 127.0.0.1:10249\n",
        "  masqueradeBit: 14\n",
        "  syncPeriod: 30s\n",
        "  minSyncPeriod: 1s\n",
        "mode: \"\"\n",
        "nodePortAddresses: null\n",
        "oomScoreAdj: -999\n",
        "featureGates: {}\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}
