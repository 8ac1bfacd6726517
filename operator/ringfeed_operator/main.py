"""kopf registrations: thin handlers that delegate to pure builders and the data-plane library."""

import kopf

# Annotations written by kopf to remember handler progress carry Ringfeed's domain.
ANNOTATION_PREFIX = "operator.ringfeed.io"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=ANNOTATION_PREFIX)
    settings.posting.level = 20  # events for INFO and above
