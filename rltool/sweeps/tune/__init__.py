"""``rltool tune``'s library: search spaces (:mod:`.space`), the population objective
(:mod:`.objective`), the study folder and its Optuna storage (:mod:`.study`), pruning from a run's
evaluations (:mod:`.prune`) and the study's report and plot (:mod:`.results`). The command itself
is :mod:`rltool.cli.tune`; optuna is imported only where a study is opened."""
