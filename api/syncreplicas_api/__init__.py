"""The SyncReplicasJob API: one typed definition of the resource (``types``, ``status``),
the operator-to-runtime contract (``contract``), their validation in the project's words
(``problems``) and the CRD generated from them (``crd``). Pure: pydantic only, no I/O."""
