"""The compile-once front end: ``torch.compile(backend="disc")`` and
``torch_disc.compile`` (:mod:`.dynamo`), graphs traced once and rerun at new
sizes (:mod:`.compiled`), frozen weights (:mod:`.freeze`), and exported
artifacts (:mod:`.export`). Its C++ half, the graph templates these rerun, is
lazy_backend/frontend/graph_template.h."""
