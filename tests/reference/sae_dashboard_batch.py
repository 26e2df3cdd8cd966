"""Run in SAEDashboard's own environment (.ref/sae_dashboard): read a Neuronpedia batch file, build SAEDashboard's
NeuronpediaDashboardBatch from it (its constructor refuses a key it does not know; a key left out takes its
default) and write the batch back out with SAEDashboard's own ``to_dict``: the layout its converter writes.

    .ref/sae_dashboard/bin/python tests/reference/sae_dashboard_batch.py IN.json OUT.json
"""

import json
import sys

from sae_dashboard.neuronpedia.neuronpedia_dashboard import NeuronpediaDashboardBatch

source, target = sys.argv[1], sys.argv[2]
with open(source, encoding="utf-8") as f:
    batch = NeuronpediaDashboardBatch(**json.load(f))
with open(target, "w", encoding="utf-8") as f:
    json.dump(batch.to_dict(), f, indent=1, ensure_ascii=False)
    f.write("\n")
