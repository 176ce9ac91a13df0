"""The ground floor of alrp-d2, below every other subpackage and free of detectron2: the errors naming a config key or
a constructor argument (:mod:`.errors`), the ranges of the losses' hyperparameters (:mod:`.hyperparameter_ranges`) and
the command-line argument types (:mod:`.argument_types`). Every floor above imports them; they import nothing of the
project (docs/architecture.md, "Floors")."""
