use super::*;

/// The state ConfigMap's name is a valid ConfigMap name for every object name Kubernetes
/// allows — cluster-scoped ones (no namespace), `:` and upper case (ClusterRoles), 253
/// characters — and distinct objects never share one.
#[test]
fn state_names_are_valid_and_distinct() {
    let long = "a".repeat(253);
    let cases: [(&str, Option<&str>, &str); 8] = [
        ("FederatedDeployment", Some("shop"), "web"),
        ("FederatedClusterRole", None, "system:controller:web"),
        ("FederatedClusterRole", None, "System_Admin"),
        ("FederatedNamespace", None, "shop"),
        ("FederatedConfigMap", Some("shop"), long.as_str()),
        ("FederatedConfigMap", Some("shop"), &long[..252]),
        ("FederatedClusterRole", None, "-.:."),
        ("FederatedClusterRole", None, "ünïcode"),
    ];
    let mut seen = std::collections::BTreeSet::new();
    for (kind, namespace, name) in cases {
        let state = state_name(kind, namespace, name);
        assert_eq!(
            crate::validation::is_dns1123_subdomain(&state),
            Vec::<String>::new(),
            "{state}"
        );
        assert!(state.starts_with(STATE_PREFIX), "{state}");
        assert!(seen.insert(state.clone()), "{state} twice");
    }
    // Readable when it can be.
    assert!(
        state_name("FederatedDeployment", Some("shop"), "web")
            .starts_with("hubfed-rollout.federateddeployment.shop.web-")
    );
    assert!(
        state_name("FederatedClusterRole", None, "system:controller:web")
            .starts_with("hubfed-rollout.federatedclusterrole.system-controller-web-")
    );
    // The same object always has the same name; a namespace is not a name.
    assert_eq!(
        state_name("FederatedDeployment", Some("shop"), "web"),
        state_name("FederatedDeployment", Some("shop"), "web")
    );
    assert_ne!(
        state_name("FederatedConfigMap", Some("a"), "b.c"),
        state_name("FederatedConfigMap", Some("a.b"), "c")
    );
    assert_ne!(
        state_name("FederatedClusterRole", None, "a:b"),
        state_name("FederatedClusterRole", None, "a-b")
    );
    assert_eq!(
        state_key("FederatedClusterRole", None, "a:b"),
        "FederatedClusterRole/a:b"
    );
}

/// A recreated object (same name, new UID) does not inherit the old object's state; only
/// cluster-scoped objects and those in the control plane's namespace can own their state.
#[test]
fn state_belongs_to_one_object() {
    assert!(state_belongs(Some("uid-1"), Some("uid-1")));
    assert!(!state_belongs(Some("uid-1"), Some("uid-2")));
    assert!(
        state_belongs(None, Some("uid-2")),
        "stored before UIDs were kept"
    );
    assert!(state_owned_by_object(None, "kube-federation-system"));
    assert!(state_owned_by_object(
        Some("kube-federation-system"),
        "kube-federation-system"
    ));
    assert!(!state_owned_by_object(
        Some("shop"),
        "kube-federation-system"
    ));
}
