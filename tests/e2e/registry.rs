//! The registry of stages and runners.

#[test]
fn registered_stages_and_runners_match_the_fixture() {
    let listing = hostpipe_cli::registry().unwrap().listing();
    let fixture =
        std::fs::read_to_string(hostpipe_tests::root().join("tests/fixtures/registry.txt"))
            .unwrap();
    assert_eq!(listing, fixture);
}
