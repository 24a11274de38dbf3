//! Every committed fixture, through both creation paths, against upstream's outputs.

mod common;
use common::*;

#[test]
fn every_fixture_matches_upstream_through_the_factory() {
    let all = Fixture::all();
    assert!(all.len() >= 10, "fixtures missing: {}", all.len());
    for f in all {
        let lib = f.load_lib();
        let m = f.executor_from_factory(&lib);
        f.set_inputs(&m);
        exec(&m).run().unwrap();
        f.check_outputs(&m, "factory");
    }
}

#[test]
fn every_fixture_matches_upstream_through_create_and_load_params() {
    for f in Fixture::all() {
        let lib = f.load_lib();
        let m = f.executor_from_create(&lib);
        f.set_inputs(&m);
        exec(&m).run().unwrap();
        f.check_outputs(&m, "create");
        // A second run gives the same answer.
        exec(&m).run().unwrap();
        f.check_outputs(&m, "create, second run");
    }
}
