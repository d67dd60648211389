use proptest::prelude::*;

use super::*;

const APP: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/manifests/app.yaml"
));
const LIST_JSON: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/manifests/list.json"
));

const SERVICE: &str = "apiVersion: v1
kind: Service
metadata: {name: web, namespace: prod}
spec:
  clusterIP: 10.96.0.10
  ports: [{name: http, port: 80, targetPort: 8080}]
";

/// `Kind namespace/name` of every object, the shape most assertions need.
fn labels(parsed: &Parsed) -> Vec<String> {
    parsed.objects.iter().map(identity::label).collect()
}

fn problems(parsed: &Parsed) -> Vec<&Problem> {
    parsed.warnings.iter().map(|w| &w.problem).collect()
}

fn service(parsed: &Parsed, index: usize) -> &Service {
    match &parsed.objects[index] {
        Object::Service(s) => s,
        other => panic!("expected a Service, got {other:?}"),
    }
}

#[test]
fn multi_document_yaml_yields_service_slice_and_node() {
    let text = format!(
        "{SERVICE}---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  namespace: prod
  labels: {{kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{{name: http, port: 8080}}]
endpoints:
  - addresses: [10.244.1.5]
    conditions: {{ready: true}}
    nodeName: node-a
---
apiVersion: v1
kind: Node
metadata: {{name: node-a}}
status:
  addresses: [{{type: InternalIP, address: 10.0.0.11}}]
"
    );
    let parsed = parse(&text, "all.yaml");
    assert_eq!(parsed.warnings, []);
    assert_eq!(
        labels(&parsed),
        [
            "Service prod/web",
            "EndpointSlice prod/web-abc",
            "Node node-a"
        ]
    );
    let web = service(&parsed, 0);
    let port = &web.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
    assert_eq!((port.port, port.name.as_deref()), (80, Some("http")));
}

#[test]
fn json_single_object_is_read() {
    let text = r#"{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-b"},
        "spec": {"podCIDRs": ["10.244.2.0/24"]}}"#;
    let parsed = parse(text, "node.json");
    assert_eq!(parsed.warnings, []);
    assert_eq!(labels(&parsed), ["Node node-b"]);
}

#[test]
fn json_list_yields_its_items_and_skips_other_kinds() {
    let parsed = parse(LIST_JSON, "list.json");
    assert_eq!(parsed.warnings, []);
    assert_eq!(
        labels(&parsed),
        ["Service tools/api", "EndpointSlice tools/api-x1"]
    );
    assert_eq!(parsed.skipped.len(), 1);
    assert_eq!(parsed.skipped[0].type_name, "v1 Pod");
    assert_eq!(
        parsed.skipped[0].place.to_string(),
        "list.json document 1 items[2]"
    );
}

#[test]
fn typed_lists_supply_apiversion_and_kind_to_their_items() {
    let text = "apiVersion: v1
kind: ServiceList
items:
  - metadata: {name: a}
  - metadata: {name: b, namespace: kube-system}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSliceList
items:
  - metadata: {name: a-1}
    addressType: IPv4
    endpoints: []
---
apiVersion: v1
kind: NodeList
items: [{metadata: {name: n1}}]
";
    let parsed = parse(text, "lists.yaml");
    assert_eq!(parsed.warnings, []);
    let want = [
        "Service default/a",
        "Service kube-system/b",
        "EndpointSlice default/a-1",
        "Node n1",
    ];
    assert_eq!(labels(&parsed), want);
}

#[test]
fn a_list_inside_a_list_is_refused() {
    let text = r#"{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "List", "items": []}]}"#;
    assert_eq!(problems(&parse(text, "x")), [&Problem::NestedList]);
}

#[test]
fn other_kinds_are_skipped_without_a_warning() {
    let parsed = parse(APP, "app.yaml");
    let skipped: Vec<&str> = parsed
        .skipped
        .iter()
        .map(|s| s.type_name.as_str())
        .collect();
    assert_eq!(skipped, ["apps/v1 Deployment", "v1 ConfigMap"]);
    // A Service of another API group (Knative) is not ours either.
    let knative = "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata: {name: k}\n";
    let parsed = parse(knative, "k.yaml");
    assert_eq!(
        (
            parsed.objects.len(),
            parsed.warnings.len(),
            parsed.skipped.len()
        ),
        (0, 0, 1)
    );
}

#[test]
fn a_bad_document_is_skipped_and_named_while_the_next_still_loads() {
    let parsed = parse(APP, "app.yaml");
    assert_eq!(
        labels(&parsed),
        ["Service shop/shop", "EndpointSlice shop/shop-1"]
    );
    let [warning] = parsed.warnings.as_slice() else {
        panic!("one warning: {:?}", parsed.warnings)
    };
    assert_eq!(warning.place, Place::document("app.yaml", 3));
    assert_eq!(warning.object.as_deref(), Some("Service shop/broken"));
    assert!(
        matches!(&warning.problem, Problem::Decode(e) if e.contains("abc")),
        "{warning}"
    );
}

#[test]
fn a_yaml_syntax_error_spoils_only_its_own_document() {
    let text = format!(
        "{SERVICE}---\nkind: Service\n  bad: [indent\n---\n{}",
        SERVICE.replace("web", "api")
    );
    let parsed = parse(&text, "s.yaml");
    assert_eq!(labels(&parsed), ["Service prod/web", "Service prod/api"]);
    assert!(
        matches!(problems(&parsed)[..], [Problem::Yaml(_)]),
        "{:?}",
        parsed.warnings
    );
    assert_eq!(parsed.warnings[0].place.document, Some(2));
}

#[test]
fn a_json_syntax_error_keeps_the_values_before_it() {
    let node = r#"{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}"#;
    let parsed = parse(&format!("{node}\n{{\"apiVersion\": oops}}"), "n.json");
    assert_eq!(labels(&parsed), ["Node n1"]);
    assert!(matches!(problems(&parsed)[..], [Problem::Json(_)]));
}

#[test]
fn unsupported_versions_of_our_kinds_are_warned_about() {
    let text = "apiVersion: discovery.k8s.io/v1beta1\nkind: EndpointSlice\nmetadata: {name: s, namespace: a}\n";
    let parsed = parse(text, "old.yaml");
    assert!(parsed.objects.is_empty());
    assert_eq!(
        parsed.warnings[0].object.as_deref(),
        Some("EndpointSlice a/s")
    );
    assert!(matches!(
        &parsed.warnings[0].problem,
        Problem::UnsupportedVersion {
            supported: "discovery.k8s.io/v1",
            ..
        }
    ));
}

#[test]
fn missing_namespace_becomes_default_and_nodes_get_none() {
    let text = "apiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: b, namespace: ''}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n}\n";
    let parsed = parse(text, "ns.yaml");
    assert_eq!(
        service(&parsed, 0).metadata.namespace.as_deref(),
        Some("default")
    );
    assert_eq!(
        service(&parsed, 1).metadata.namespace.as_deref(),
        Some("default")
    );
    let Object::Node(node) = &parsed.objects[2] else {
        panic!("a Node")
    };
    assert_eq!(node.metadata.namespace, None);
}

#[test]
fn a_later_duplicate_wins_and_both_places_are_named() {
    let text = format!(
        "{SERVICE}---\n{}",
        SERVICE.replace("10.96.0.10", "10.96.0.99")
    );
    let parsed = parse(&text, "dup.yaml");
    assert_eq!(labels(&parsed), ["Service prod/web"]);
    let cluster_ip = service(&parsed, 0)
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref());
    assert_eq!(cluster_ip, Some("10.96.0.99"));
    let [warning] = parsed.warnings.as_slice() else {
        panic!("one warning")
    };
    assert_eq!(warning.place, Place::document("dup.yaml", 2));
    assert_eq!(
        warning.problem,
        Problem::Duplicate {
            earlier: Place::document("dup.yaml", 1)
        }
    );
}

#[test]
fn empty_and_comment_only_texts_are_fine() {
    for text in [
        "",
        "\n\n",
        "# just a comment\n",
        "---\n---\n",
        "---\n# c\n...\n",
        "\u{feff}",
    ] {
        assert_eq!(parse(text, "e.yaml"), Parsed::default(), "{text:?}");
    }
}

#[test]
fn documents_that_are_not_objects_are_warned_about() {
    let parsed = parse(
        "just a string\n---\n[1, 2]\n---\nmetadata: {name: x}\n",
        "odd.yaml",
    );
    let want = [
        &Problem::NotAMapping("a string"),
        &Problem::NotAMapping("a sequence"),
        &Problem::MissingType,
    ];
    assert_eq!(problems(&parsed), want);
    let nameless = parse("apiVersion: v1\nkind: Service\nspec: {}\n", "n.yaml");
    assert_eq!(problems(&nameless), [&Problem::MissingName]);
}

#[test]
fn only_yaml_1_2_booleans_are_booleans() {
    // Go's YAML 1.1 would read `n` as false and refuse the name; we read it as the string "n".
    let node = parse(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n",
        "n.yaml",
    );
    assert_eq!(labels(&node), ["Node n"]);
    let text = "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {allocateLoadBalancerNodePorts: yes}\n";
    assert!(matches!(
        problems(&parse(text, "b.yaml"))[..],
        [Problem::Decode(_)]
    ));
    let text = text.replace("yes", "true");
    let parsed = parse(&text, "b.yaml");
    assert_eq!(
        service(&parsed, 0)
            .spec
            .as_ref()
            .unwrap()
            .allocate_load_balancer_node_ports,
        Some(true)
    );
}

#[test]
fn oversized_text_is_refused_whole() {
    let text = " ".repeat(MAX_TEXT_BYTES + 1);
    assert!(matches!(
        problems(&parse(&text, "big.yaml"))[..],
        [Problem::TooLarge { .. }]
    ));
}

#[test]
fn alias_bombs_and_deep_nesting_are_refused_not_expanded() {
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for (prev, next) in ["a", "b", "c", "d", "e", "f", "g", "h"]
        .iter()
        .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
    {
        bomb.push_str(&format!("{next}: &{next} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
    }
    assert!(matches!(
        problems(&parse(&bomb, "bomb.yaml"))[..],
        [Problem::Yaml(_)]
    ));
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(matches!(
        problems(&parse(&deep, "deep.yaml"))[..],
        [Problem::Yaml(_)]
    ));
    let deep_json = format!("{}{}", "{\"a\":".repeat(10_000), "}".repeat(10_000));
    assert!(matches!(
        problems(&parse(&deep_json, "deep.json"))[..],
        [Problem::Json(_)]
    ));
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        let _ = parse(&text, "p");
    }

    #[test]
    fn mutated_manifests_never_panic(
        cut in 0..APP.len(),
        insert in prop::sample::select(vec!["", "---\n", "{", "]", ": ", "\n  - ", "&a ", "*a", "\"", "'", "\t", "#", "!!int ", "...\n"]),
        keep in 0..APP.len(),
    ) {
        let (cut, keep) = (floor(APP, cut), floor(APP, keep));
        let mutated = format!("{}{insert}{}", &APP[..cut], &APP[keep.max(cut)..]);
        let _ = parse(&mutated, "m");
        let mutated_json = format!("{}{insert}{}", &LIST_JSON[..floor(LIST_JSON, cut)], &LIST_JSON[floor(LIST_JSON, keep)..]);
        let _ = parse(&mutated_json, "j");
    }
}

/// The largest char boundary of `text` at or below `i`.
fn floor(text: &str, i: usize) -> usize {
    (0..=i.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}
