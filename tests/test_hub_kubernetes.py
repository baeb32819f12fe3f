"""The Kubernetes variant of the course's hub (deploy/kubernetes/values.yaml, Zero to JupyterHub with ngshare),
checked as far as runs here: its hub configuration is executed as the chart's jupyterhub_config.py would
execute it, and KubeSpawner (from PyPI) takes its settings. helm and a cluster are not run."""

from pathlib import Path

import yaml
from kubespawner import KubeSpawner
from traitlets.config import Config

VALUES = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes" / "values.yaml"


def test_the_charts_hub_config_configures_kubespawner_for_the_course():
    values = yaml.safe_load(VALUES.read_text())
    c = Config()
    c.JupyterHub.services = []
    exec(compile(values["hub"]["extraConfig"]["mlsys"], f"{VALUES}:hub.extraConfig.mlsys", "exec"), {"c": c})
    # every KubeSpawner setting is one of its configurable traits and its value passes the trait's validation
    # (instantiating the spawner needs a cluster's credentials)
    traits = KubeSpawner.class_traits(config=True)
    assert set(c.KubeSpawner) <= set(traits), set(c.KubeSpawner) - set(traits)
    for name, value in c.KubeSpawner.items():
        traits[name].validate(KubeSpawner, value)
    assert c.KubeSpawner.image == f"{values['singleuser']['image']['name']}:{values['singleuser']['image']['tag']}"
    assert c.KubeSpawner.default_url == "/lab" and c.KubeSpawner.environment["MLSYS_HUB_COURSE"] == "mlsys"
    groups = c.JupyterHub.load_groups
    assert "grader-mlsys" in groups["formgrade-mlsys"]["users"] and "nbgrader-mlsys" in groups
    role = values["hub"]["loadRoles"]["formgrade-mlsys"]
    assert role["groups"] == ["formgrade-mlsys"] and "access:services!service=mlsys" in role["scopes"]


def test_the_students_nbgrader_config_uses_ngshare_for_the_course():
    text = yaml.safe_load(VALUES.read_text())["singleuser"]["extraFiles"]["nbgrader-config"]["stringData"]
    calls = []
    c = Config()
    namespace = {"get_config": lambda: c}
    # ngshare_exchange pins jupyter_core<4.11.2, which the course's environment cannot take: its call is recorded
    code = text.replace("from ngshare_exchange import configureExchange\n", "")
    namespace["configureExchange"] = lambda config, url: calls.append(url)
    exec(compile(code, "nbgrader_config.py", "exec"), namespace)
    assert c.CourseDirectory.course_id == "mlsys"
    assert calls == ["http://proxy-public.mlsys.svc.cluster.local/services/ngshare"]
