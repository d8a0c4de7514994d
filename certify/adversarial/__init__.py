"""Adversarial lower bounds on Lipschitz constants: inputs with large Jacobian norm (MATH.md section 5)."""

from ._ascent import lower_bound as lower_bound, project as project, starting_points as starting_points
