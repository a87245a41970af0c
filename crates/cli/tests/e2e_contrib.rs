//! The examples in contrib/ say what the binary does: every Kubernetes manifest parses as YAML
//! (PyYAML, a parser no one here wrote), and every `fastrepl` subcommand, flag and `FASTREPL_*`
//! variable the manifests and the Containerfile use exists in the binary's own `--help`. The
//! manifests were not run on a Kubernetes cluster here (contrib/k8s/README.md says so).

mod common;
use common::*;
use std::collections::BTreeSet;
use std::path::Path;

fn contrib() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib")
}

/// The documents of a YAML file as JSON, parsed by PyYAML.
fn yaml_documents(path: &Path) -> Vec<serde_json::Value> {
    let script = "import json,sys,yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]))";
    // Debian's python3 (scripts/setup.sh installs python3-yaml for it) before whatever else is on PATH.
    let python = if Path::new("/usr/bin/python3").exists() { "/usr/bin/python3" } else { "python3" };
    let out = std::process::Command::new(python).args(["-c", script]).arg(path).output().expect("run python3");
    assert!(out.status.success(), "{} does not parse as YAML:\n{}", path.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("PyYAML's JSON").as_array().cloned().unwrap_or_default()
}

/// Every container spec in a parsed document, wherever it sits (pods, templates, init containers).
fn containers(v: &serde_json::Value, out: &mut Vec<serde_json::Value>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if (k == "containers" || k == "initContainers") && x.is_array() {
                    out.extend(x.as_array().into_iter().flatten().cloned());
                }
                containers(x, out);
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| containers(x, out)),
        _ => {}
    }
}

/// (subcommand, flags, env names) a fastrepl container uses.
fn usage(c: &serde_json::Value) -> Option<(String, Vec<String>, Vec<String>)> {
    let strings = |k: &str| c[k].as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect::<Vec<_>>()).unwrap_or_default();
    let env: Vec<String> = c["env"].as_array().into_iter().flatten().filter_map(|e| e["name"].as_str().map(str::to_string)).filter(|n| n.starts_with("FASTREPL_")).collect();
    let image = c["image"].as_str().unwrap_or_default();
    let (cmd, args) = (strings("command"), strings("args"));
    // `sh -c "fastrepl join --json; …"`: the words after `fastrepl`, up to the shell's `;`.
    if let Some(line) = cmd.iter().chain(&args).find(|s| s.contains("fastrepl ")) {
        let words: Vec<String> = line.split("fastrepl ").nth(1)?.split(';').next()?.split_whitespace().map(str::to_string).collect();
        return Some((words[0].clone(), words[1..].iter().filter(|w| w.starts_with("--")).cloned().collect(), env));
    }
    if image.starts_with("fastrepl") {
        return Some((args.first()?.clone(), args.iter().filter(|w| w.starts_with("--")).cloned().collect(), env));
    }
    None
}

fn help(sub: &str) -> String {
    let out = fastrepl().args([sub, "--help"]).output().expect("run fastrepl --help");
    assert!(out.status.success(), "fastrepl {sub} --help failed: no such subcommand?\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn kubernetes_examples_parse_and_use_only_what_exists() {
    let dir = contrib().join("k8s");
    let mut used = 0;
    let mut subs = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("contrib/k8s") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let docs = yaml_documents(&path);
        assert!(!docs.is_empty(), "{}: no documents", path.display());
        for d in &docs {
            assert!(d["apiVersion"].is_string() && d["kind"].is_string(), "{}: a document without apiVersion/kind", path.display());
        }
        let mut cs = Vec::new();
        docs.iter().for_each(|d| containers(d, &mut cs));
        for c in &cs {
            let Some((sub, flags, env)) = usage(c) else { continue };
            let h = help(&sub);
            for f in &flags {
                let name = f.split('=').next().unwrap_or(f);
                assert!(h.contains(&format!("{name} ")) || h.contains(&format!("{name}\n")) || h.contains(&format!("{name} <")), "{}: fastrepl {sub} has no flag {name}", path.display());
            }
            for e in &env {
                assert!(h.contains(&format!("[env: {e}=")), "{}: fastrepl {sub} reads no {e}", path.display());
            }
            used += 1;
            subs.insert(sub);
        }
    }
    assert!(used >= 3, "the examples run fastrepl in at least three containers ({used})");
    assert_eq!(subs.into_iter().collect::<Vec<_>>(), vec!["join".to_string(), "stage".to_string()]);
}

#[test]
fn the_containerfile_builds_the_product_binary_without_secrets() {
    let text = std::fs::read_to_string(contrib().join("container/Containerfile")).expect("Containerfile");
    assert!(text.contains("-p cli --bin fastrepl"), "it builds the product binary");
    assert!(!text.contains("fastrepl-lab"), "no lab code in the image");
    assert!(text.lines().any(|l| l.starts_with("USER ") && !l.contains("root")), "a non-root user");
    for secret in ["FASTREPL_TOKEN=", "PASSWORD="] {
        assert!(!text.contains(secret), "no secret baked in ({secret})");
    }
    // The features it names exist: `--no-default-features` builds without UCX (scripts/product_check.sh).
    let manifest = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    assert!(manifest.contains("ucx"), "the cli crate has the ucx feature the Containerfile switches");
}
