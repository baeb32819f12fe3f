"""Running a class: the course's JupyterHub (``deploy/jupyterhub``) and its Kubernetes variant (``deploy/kubernetes``)."""
