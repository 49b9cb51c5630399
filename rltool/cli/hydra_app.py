"""A Hydra app run on an explicit argument list, its exceptions raised.

``@hydra.main`` parses ``sys.argv`` and prints a job's exception itself (then ``sys.exit(1)``)
unless ``HYDRA_FULL_ERROR=1`` is in ``os.environ``: both are process state, which the dispatcher
would have to rewrite. :func:`run_app` does what ``@hydra.main`` does in hydra-core 1.3
(``hydra._internal.utils._run_hydra``: Hydra's own argument parser, the same search path, task
name, help, ``--cfg``, ``--info``, run and multirun) on ``argv`` and lets every exception through
(the dispatcher prints one line), without ``run_and_report``. What it uses of Hydra is what its
launcher and sweeper plugins use too.
"""

from __future__ import annotations

from collections.abc import Callable

from rltool.errors import UserError


def run_app(
    argv: list[str],
    task_function: Callable,
    config_path: str,
    config_name: str,
    task_name: str,
) -> None:
    """Hydra's command line ``argv`` (without the program name) for ``task_function`` (called
    with each job's config); ``task_name``: Hydra's ``hydra.job.name``."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_automatic_config_search_path, get_args_parser
    from hydra.core.global_hydra import GlobalHydra

    parser = get_args_parser()
    args = parser.parse_args(argv)
    if args.experimental_rerun is not None:
        raise UserError("--experimental-rerun is not supported by rltool train")
    config_name = args.config_name or config_name
    search_path = create_automatic_config_search_path(None, None, args.config_path or config_path)
    if args.config_dir is not None:
        _add_config_dir(search_path, args.config_dir)
    hydra = Hydra.create_main_hydra2(task_name=task_name, config_search_path=search_path)
    try:
        _dispatch(hydra, args, parser, task_function, config_name)
    finally:
        GlobalHydra.instance().clear()


def _add_config_dir(search_path, config_dir: str) -> None:
    import os

    from hydra.core.config_search_path import SearchPathQuery
    from hydra.errors import SearchPathException

    path = os.path.abspath(config_dir)
    if not os.path.isdir(path):
        raise SearchPathException(f"Additional config directory '{path}' not found")
    search_path.prepend("command-line", f"file://{path}", SearchPathQuery(provider="schema"))


def _dispatch(hydra, args, parser, task_function: Callable, config_name: str) -> None:
    """What ``_run_hydra`` does once Hydra is created: one of help, --cfg, --info, run, multirun."""
    from hydra.types import RunMode

    if args.help:
        return hydra.app_help(config_name=config_name, args_parser=parser, args=args)
    if args.hydra_help:
        return hydra.hydra_help(config_name=config_name, args_parser=parser, args=args)
    shows = args.cfg is not None
    if args.resolve and not shows:
        raise UserError("--resolve goes with --cfg (or --help)")
    if args.run + shows + args.multirun + args.shell_completion + (args.info is not None) > 1:
        raise UserError("give only one of --run, --multirun, --cfg, --info, --shell-completion")
    overrides = list(args.overrides)
    if shows:
        return hydra.show_cfg(
            config_name=config_name,
            overrides=overrides,
            cfg_type=args.cfg,
            package=args.package,
            resolve=args.resolve,
        )
    if args.info is not None:
        return hydra.show_info(args.info, config_name=config_name, overrides=overrides)
    if args.shell_completion:
        return hydra.shell_completion(config_name=config_name, overrides=overrides)
    mode = hydra.get_mode(config_name=config_name, overrides=overrides)
    multirun = args.multirun or mode == RunMode.MULTIRUN
    if mode is None or (args.multirun and mode == RunMode.RUN):
        overrides.append(f"hydra.mode={'MULTIRUN' if multirun else 'RUN'}")
    go = hydra.multirun if multirun else hydra.run
    go(config_name=config_name, task_function=task_function, overrides=overrides)
    return None
