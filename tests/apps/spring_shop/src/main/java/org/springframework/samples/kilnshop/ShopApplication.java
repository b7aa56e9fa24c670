package org.springframework.samples.kilnshop;

import org.springframework.boot.CommandLineRunner;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.annotation.Bean;

/**
 * A shop whose DB calls are known by construction: OWNERS owners with PETS pets each. Its
 * package sits under a framework vendor's prefix, as Spring's own samples do.
 */
@SpringBootApplication
public class ShopApplication {
    static final int OWNERS = 10;
    static final int PETS = 2;

    public static void main(String[] args) {
        SpringApplication.run(ShopApplication.class, args);
    }

    @Bean
    CommandLineRunner seed(OwnerRepository owners, PetRepository pets) {
        return args -> {
            for (int i = 1; i <= OWNERS; i++) {
                Owner owner = owners.save(new Owner("owner-" + i));
                for (int j = 1; j <= PETS; j++) {
                    pets.save(new Pet("pet-" + i + "-" + j, owner));
                }
            }
        };
    }
}
