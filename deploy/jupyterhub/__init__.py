"""The course's JupyterHub on one machine: the class settings (:mod:`.classroom`), the accounts and
folders they need (:mod:`.provision`), and the hub's own configuration file (``jupyterhub_config.py``)."""
