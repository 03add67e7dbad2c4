"""The sweep reader's helpers (tinygpt.analysis.sweep)."""



def test_the_honest_gap_step_is_the_first_validation_the_alarm_rule_passes():
    """Gaps 0.01, 0.2, 0.5 with standard errors 0.1: the rule (above 3 SE and above 0.05 nats) first passes at the
    third validation; 0.2 is above 0.05 but not above 3 SE."""
    from tinygpt.analysis.sweep import Run, honest_gap_step
    cfg = {"callbacks": {"leak_alarm": {"z": 3.0, "min_gap": 0.05}}}
    run = Run(dir=None, summary={"config": cfg},
              history={"leak/honest_gap": ([100, 200, 300], [0.01, 0.2, 0.5]),
                       "leak/honest_gap_se": ([100, 200, 300], [0.1, 0.1, 0.1])})
    assert honest_gap_step(run) == 300
    run.history["leak/honest_gap"] = ([100, 200, 300], [0.01, 0.2, 0.25])
    assert honest_gap_step(run) is None


