package org.springframework.samples.kilnshop;

import org.springframework.data.jpa.repository.JpaRepository;
import org.springframework.data.jpa.repository.Query;
import org.springframework.data.repository.query.Param;

public interface OwnerRepository extends JpaRepository<Owner, Long> {
    // A query, not a lookup by id: it reaches the database every time it is called.
    @Query("select o from Owner o where o.id = :id")
    Owner load(@Param("id") Long id);
}
