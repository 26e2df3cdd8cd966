"""A CPU model actor for a self-hosted NDIF (ndif 0.1.2 assumes CUDA in four places).

The controller deploys this class when ``NDIF_MODEL_IMPORT_PATH=cpu_actor.CPUModelActor`` and
this folder is on the Ray workers' ``PYTHONPATH``. Loading, parking (HOT <-> WARM) and the
per-request clean-up are the base actor's, without the CUDA calls; everything else (running
requests, results, errors) is ndif's own code.
"""

from __future__ import annotations

import gc
import logging
import time

import ray
from ndif.services.ray.deployments.modeling.base import BaseModelDeployment
from nnsight.modeling.huggingface import HuggingFaceModel

logger = logging.getLogger("ndif.modeling")


class CPUModelDeployment(BaseModelDeployment):
    CACHEABLE = False  # nothing to free: the weights already live in CPU memory

    def load_from_disk(self) -> HuggingFaceModel:
        started = time.time()
        model = HuggingFaceModel.from_model_key(self.model_key, dispatch=True, dtype=self.dtype_name, **self.kwargs)
        model._module.requires_grad_(False)
        logger.info("Loaded %s on CPU in %.1f s", self.model_key, time.time() - started)
        return model

    async def to_cache(self) -> None:
        await self.cancel("preempted")
        self.cached = True

    def from_cache(self, gpu_mem_bytes_by_id) -> None:
        self.gpu_mem_bytes_by_id = gpu_mem_bytes_by_id
        self.cached = False

    def cleanup(self) -> None:
        self.kill_switch.clear()
        self.kill_reason = None
        self.execution_ident = None
        self.model.interleaver.cancel()
        gc.collect()


@ray.remote(num_cpus=1, max_restarts=-1)
class CPUModelActor(CPUModelDeployment):
    pass
