"""rltool's joblib launcher (:mod:`rltool.sweeps.launcher`), defined here because Hydra loads
launchers from the ``hydra_plugins`` package only."""

try:
    from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher

    from rltool.sweeps.launcher import OneProcessPerJob as _Launch

    class OneProcessPerJob(_Launch, JoblibLauncher):
        """hydra/launcher=joblib: a worker's loss costs its own job only."""

except ImportError:  # no hydra-joblib-launcher: hydra/launcher=joblib is refused before this
    pass
