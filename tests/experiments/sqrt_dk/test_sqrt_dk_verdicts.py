

def test_a_cell_whose_seeds_split_between_diverging_and_not_is_marked():
    """One of three runs at 1e-2 diverged, none at 1e-3 and all at 1e-1: only the 1e-2 cell is split."""
    from types import SimpleNamespace

    from tinygpt.experiments.sqrt_dk.report import split_cells

    def run(diverged):
        return SimpleNamespace(summary={"diverged": diverged, "val_loss": float("nan") if diverged else 2.0})

    curve = SimpleNamespace(runs={-3.0: [run(False)] * 3, -2.0: [run(True), run(False), run(False)],
                                  -1.0: [run(True)] * 3})
    assert split_cells(curve) == {-2.0: (1, 3)}
