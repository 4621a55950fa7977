"""The Compute Engine REST subset and GCE metadata model the agent's and the gate's tests run against: the lab's
(wg_mesh/lab/clouds/compute.py, which the lab's GCP model serves at run time; tests import from the lab, never the
reverse)."""

from wg_mesh.lab.clouds.compute import LINK, PROJECT, REGION, TOKEN, ZONE, Cloud, Handler, Vm, serve

__all__ = ["LINK", "PROJECT", "REGION", "TOKEN", "ZONE", "Cloud", "Handler", "Vm", "serve"]
